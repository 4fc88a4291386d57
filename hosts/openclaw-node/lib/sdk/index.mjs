// This host's implementation of the `openclaw` plugin-SDK helpers a context-engine plugin
// imports (used when the `openclaw` package itself is not installed): the entry helper, the
// empty config schema and compaction delegation, with the SDK's signatures.

import { callHost } from "../rpc.mjs";

/** `definePluginEntry`: the normalised plugin object, `configSchema` defaulting to empty. */
export function definePluginEntry({ id, name, description, kind, configSchema = emptyPluginConfigSchema, reload, nodeHostCommands, securityAuditCollectors, register }) {
  let schema;
  return {
    id,
    name,
    description,
    ...(kind ? { kind } : {}),
    ...(reload ? { reload } : {}),
    ...(nodeHostCommands ? { nodeHostCommands } : {}),
    ...(securityAuditCollectors ? { securityAuditCollectors } : {}),
    get configSchema() {
      schema ??= typeof configSchema === "function" ? configSchema() : configSchema;
      return schema;
    },
    register,
  };
}

/** `emptyPluginConfigSchema`: accepts no config or `{}`. */
export function emptyPluginConfigSchema() {
  const error = (message) => ({ success: false, error: { issues: [{ path: [], message }] } });
  return {
    safeParse(value) {
      if (value === undefined) return { success: true, data: undefined };
      if (!value || typeof value !== "object" || Array.isArray(value)) return error("expected config object");
      if (Object.keys(value).length > 0) return error("config must be empty");
      return { success: true, data: value };
    },
    jsonSchema: { type: "object", additionalProperties: false, properties: {} },
  };
}

/** `delegateCompactionToRuntime`: compaction by the host runtime (ctxbridge), for engines that do not own it. */
export async function delegateCompactionToRuntime(params = {}) {
  const { runtimeContext, abortSignal, ...rest } = params;
  if (typeof runtimeContext?.delegateCompaction === "function") return runtimeContext.delegateCompaction(rest);
  return callHost("runtime/delegateCompaction", rest);
}

/**
 * `buildMemorySystemPromptAddition`: the memory section a memory plugin contributes. This host
 * runs no memory plugin, so there is none.
 */
export function buildMemorySystemPromptAddition() {
  return undefined;
}
