// Serving a loaded plugin over the engine process protocol (docs/engine-protocol.md#the-engine-process-protocol): `initialize`, the
// lifecycle methods, `rollbackSubagentSpawn`, `tools/call`, `hooks/<name>` and
// `commands/call`.

import { randomUUID } from "node:crypto";
import path from "node:path";

import { HOOK_NAMES, llmComplete, makeApi, makeLogger, makeRegistry, makeSessionIndex } from "./api.mjs";
import { applyConfigSchema, formatConfigErrors } from "./config-schema.mjs";
import { checkNodeEngine, loadPluginEntry, resolvePluginPath } from "./load-plugin.mjs";
import { callHost, currentCall, ErrorCode, log, RpcError } from "./rpc.mjs";
import { appendSessionMessages, ensureSessionFile, readSessionFile } from "./session-file.mjs";
import { setUpStateDir } from "./state-dir.mjs";

/** Contract members (docs/architecture.md#the-engine-contract) the host forwards to the engine object. */
export const CONTRACT_METHODS = [
  "ingest", "assemble", "compact", "bootstrap", "maintain", "ingestBatch", "afterTurn",
  "commitTurn", "prepareSubagentSpawn", "rollbackSubagentSpawn", "onSubagentEnded", "dispose",
];

// Methods whose params carry a `sessionFile` in OpenClaw.
const SESSION_FILE_METHODS = new Set(["bootstrap", "maintain", "afterTurn", "compact"]);

/** One served plugin: created by `initialize`, answering every later request. */
export class PluginServer {
  constructor(pluginPath) {
    this.pluginPath = pluginPath;
    this.engine = null;
    this.registry = makeRegistry();
    this.sessions = makeSessionIndex();
    this.rollbacks = new Map(); // rollbackId -> rollback()
    this.serviceContext = null;
  }

  /** `initialize` → `{protocolVersion, info, methods, tools, hooks, commands, unoffered}`. */
  async initialize(params = {}) {
    this.params = params;
    this.engineId = params.engineId;
    // The state dir (and HOME/TMPDIR under it) must be in place before the plugin's code runs.
    this.dirs = setUpStateDir(params);
    const { entryFile, rootDir, manifest, packageJson } = resolvePluginPath(this.pluginPath);
    const tooOld = checkNodeEngine(packageJson);
    if (tooOld) throw new RpcError(ErrorCode.ENGINE_FAILED, tooOld);
    const entry = await loadPluginEntry(entryFile);
    const pluginId = entry.id ?? manifest?.id ?? packageJson?.name ?? params.engineId;

    const checked = applyConfigSchema({ schema: entry.configSchema, jsonSchema: manifest?.configSchema, value: params.config });
    if (!checked.ok) {
      throw new RpcError(
        ErrorCode.CONFIG_INVALID,
        `invalid config for plugin "${pluginId}" (plugins.entries.${params.engineId}.config): ${formatConfigErrors(checked.errors)}`,
        { kind: "config", errors: checked.errors.map((e) => ({ key: e.path, message: e.message })) },
      );
    }
    const pluginConfig = checked.value ?? {};
    this.openclawConfig = params.openclawConfig ?? {
      plugins: {
        slots: { contextEngine: params.engineId },
        entries: { [params.engineId]: { enabled: true, config: pluginConfig } },
      },
      agents: { defaults: { ...(this.dirs.workspaceDir ? { workspace: this.dirs.workspaceDir } : {}) } },
    };
    this.api = makeApi({
      pluginId,
      pluginName: entry.name ?? manifest?.name,
      version: entry.version ?? packageJson?.version,
      description: entry.description ?? manifest?.description,
      source: entryFile,
      rootDir,
      pluginConfig,
      openclawConfig: this.openclawConfig,
      dirs: this.dirs,
      engineId: params.engineId,
      model: params.model,
      registry: this.registry,
      sessions: this.sessions,
      firedHooks: params.host?.hooks,
    });
    await entry.register(this.api);

    const factories = this.registry.engines;
    let id = params.engineId;
    if (!factories.has(id)) {
      if (factories.size !== 1) {
        throw new RpcError(ErrorCode.ENGINE_FAILED, `plugin registers [${[...factories.keys()].join(", ")}], none of them "${params.engineId}"`);
      }
      [id] = factories.keys();
      log(`engine id "${params.engineId}" not registered; serving the only engine, "${id}"`);
    }
    const engine = await factories.get(id)({
      config: this.openclawConfig,
      agentDir: this.dirs.agentDir,
      workspaceDir: this.dirs.workspaceDir,
    });
    if (!engine || typeof engine !== "object") {
      throw new RpcError(ErrorCode.ENGINE_FAILED, `the factory of "${id}" returned no engine object`);
    }
    this.engine = engine;

    this.serviceContext = {
      config: this.openclawConfig,
      workspaceDir: this.dirs.workspaceDir,
      stateDir: this.dirs.stateDir,
      logger: makeLogger(pluginId),
    };
    for (const service of this.registry.services) await service.start(this.serviceContext);

    const info = typeof engine.info === "function" ? await engine.info() : engine.info;
    const methods = CONTRACT_METHODS.filter((name) => typeof engine[name] === "function");
    // Rollback handles returned by prepareSubagentSpawn are kept here, so the host serves
    // rollbackSubagentSpawn for any engine that prepares spawns.
    if (methods.includes("prepareSubagentSpawn") && !methods.includes("rollbackSubagentSpawn")) {
      methods.push("rollbackSubagentSpawn");
    }
    return {
      protocolVersion: 1,
      info,
      methods,
      tools: await this.listTools(),
      hooks: [...this.registry.hooks.keys()].filter((name) => HOOK_NAMES.includes(name)),
      commands: [...this.registry.commands].map(([name, c]) => ({
        name,
        description: c.description ?? "",
        acceptsArgs: Boolean(c.acceptsArgs),
      })),
      // Registration seams the plugin used that this host does not offer (doctor lists them).
      unoffered: [...this.registry.unoffered.keys()],
    };
  }

  // ---- tools -------------------------------------------------------------------------------

  toolContext(call = {}) {
    return {
      config: this.openclawConfig,
      runtimeConfig: this.openclawConfig,
      getRuntimeConfig: () => this.openclawConfig,
      workspaceDir: this.dirs.workspaceDir,
      agentDir: this.dirs.agentDir,
      agentId: call.agentId ?? "main",
      sessionKey: call.sessionKey,
      sessionId: call.sessionId,
      assertInvocationCurrent: () => {},
    };
  }

  /** The tools a registration yields for `call` (a factory may yield none, one or many). */
  async toolsOf(registration, call) {
    if (registration.tool) return [registration.tool];
    const made = await registration.factory(this.toolContext(call));
    if (!made) return [];
    return (Array.isArray(made) ? made : [made]).filter((t) => t && typeof t.name === "string");
  }

  async listTools() {
    const out = [];
    for (const registration of this.registry.tools) {
      for (const tool of await this.toolsOf(registration, {})) {
        out.push({
          name: tool.name,
          description: tool.description ?? tool.label ?? "",
          // TypeBox schemas are JSON Schema objects (their Symbol keys do not serialise).
          parameters: JSON.parse(JSON.stringify(tool.parameters ?? { type: "object", properties: {} })),
        });
      }
    }
    return out;
  }

  /** `tools/call {sessionId, sessionKey?, name, arguments, toolCallId?}` → `{content, isError?}`. */
  async callTool(params = {}) {
    const { name } = params;
    const call = { sessionId: params.sessionId, sessionKey: params.sessionKey };
    let tool;
    for (const registration of this.registry.tools) {
      tool = (await this.toolsOf(registration, call)).find((t) => t.name === name);
      if (tool) break;
    }
    if (!tool) throw new RpcError(ErrorCode.INVALID_PARAMS, `no tool named "${name}"`);
    let args = params.arguments ?? {};
    if (typeof args === "string") args = args.trim() ? JSON.parse(args) : {};
    if (typeof tool.prepareArguments === "function") args = tool.prepareArguments(args);
    try {
      const result = await tool.execute(params.toolCallId ?? `call-${randomUUID()}`, args, undefined, () => {});
      const content = (result?.content ?? []).map((part) =>
        part?.type === "text" ? { type: "text", text: String(part.text ?? "") } : { type: "text", text: JSON.stringify(part) },
      );
      return { content, ...(result?.isError ? { isError: true } : {}) };
    } catch (error) {
      // OpenClaw tools throw on failure; the model sees the message as an error result.
      return { content: [{ type: "text", text: error?.message ?? String(error) }], isError: true };
    }
  }

  // ---- hooks -------------------------------------------------------------------------------

  /**
   * `hooks/<name> {event, ctx?}`: runs the plugin's handlers in priority order. For
   * `before_prompt_build` the result is the handlers' results combined
   * (`prependSystemContext`, `appendSystemContext`, `prependContext`, `appendContext` joined
   * with blank lines in handler order; `systemPrompt` the last one given); for other hooks the
   * handlers' result objects merged, or null.
   */
  async runHook(name, params = {}) {
    const handlers = this.registry.hooks.get(name) ?? [];
    const event = params.event ?? {};
    const ctx = {
      agentId: "main",
      workspaceDir: this.dirs.workspaceDir,
      config: this.openclawConfig,
      ...(params.ctx ?? {}),
      ...(name === "before_prompt_build" ? { hookInvocation: { assertActive() {} } } : {}),
    };
    const session = { sessionId: ctx.sessionId ?? event.sessionId, sessionKey: ctx.sessionKey ?? event.sessionKey };
    const results = [];
    await currentCall.run(session, async () => {
      for (const { handler } of handlers) {
        const result = await handler(event, ctx);
        if (result && typeof result === "object") results.push(result);
      }
    });
    if (name !== "before_prompt_build") return results.length ? Object.assign({}, ...results) : null;
    const combined = {};
    for (const key of ["prependSystemContext", "appendSystemContext", "prependContext", "appendContext"]) {
      const parts = results.map((r) => r[key]).filter((v) => typeof v === "string" && v.length);
      if (parts.length) combined[key] = parts.join("\n\n");
    }
    const systemPrompt = results.map((r) => r.systemPrompt).filter((v) => typeof v === "string").pop();
    if (systemPrompt !== undefined) combined.systemPrompt = systemPrompt;
    const toolsAllow = results.map((r) => r.toolsAllow).filter(Array.isArray).pop();
    if (toolsAllow) combined.toolsAllow = toolsAllow;
    return combined;
  }

  // ---- commands ----------------------------------------------------------------------------

  /** `commands/call {name, args?, sessionId?, sessionKey?}` → the command's reply payload (`{text?, …}`). */
  async callCommand(params = {}) {
    const name = String(params.name ?? "").replace(/^\//, "");
    const command = this.registry.commands.get(name);
    if (!command) throw new RpcError(ErrorCode.INVALID_PARAMS, `no command named "${name}"`);
    const args = params.args === undefined ? undefined : String(params.args);
    const session = { sessionId: params.sessionId, sessionKey: params.sessionKey };
    const result = await command.handler({
      channel: "ctxbridge",
      isAuthorizedSender: true,
      senderIsOwner: true,
      agentId: "main",
      sessionKey: params.sessionKey,
      sessionId: params.sessionId,
      args,
      commandBody: args ? `/${name} ${args}` : `/${name}`,
      config: this.openclawConfig,
      runtimeContext: { llm: { complete: (p) => llmComplete(p, { engineId: this.engineId, session }) } },
      requestConversationBinding: () => Promise.reject(new Error("not supported by this host: requestConversationBinding")),
      detachConversationBinding: async () => ({ removed: false }),
      getCurrentConversationBinding: async () => null,
    });
    return result ?? {};
  }

  // ---- lifecycle ---------------------------------------------------------------------------

  /** The `runtimeContext` object an OpenClaw engine expects, with host callbacks. */
  withCallbacks(runtimeContext, session) {
    const { sessionId } = session;
    return {
      ...runtimeContext,
      rewriteTranscriptEntries: (request) => callHost("runtime/rewriteTranscriptEntries", { sessionId, ...request }),
      llm: { complete: (params) => llmComplete(params, { engineId: this.engineId, session }) },
      delegateCompaction: (params) => callHost("runtime/delegateCompaction", { ...params, sessionId: params?.sessionId ?? sessionId }),
    };
  }

  // ctxbridge passes `sessionFile`; without one the host keeps a transcript in OpenClaw's
  // format under the state dir (header at first sight, afterTurn's new messages appended).
  fallbackSessionFile(method, args) {
    if (!SESSION_FILE_METHODS.has(method) || args.sessionFile || !args.sessionId) return;
    const file = path.join(this.dirs.stateDir, "sessions", `${String(args.sessionId).replace(/[^A-Za-z0-9._-]/g, "_")}.jsonl`);
    ensureSessionFile(file, args.sessionId, this.dirs.workspaceDir ?? process.cwd());
    if (method === "afterTurn" && Array.isArray(args.messages)) {
      const known = readSessionFile(file).entries.filter((e) => e?.type === "message").length;
      appendSessionMessages(file, args.messages.slice(known));
    }
    args.sessionFile = file;
  }

  /** Runs one lifecycle method; `abortSignal` is given to compact and maintain. */
  async lifecycle(method, params = {}, abortSignal) {
    const engine = this.engine;
    if (method === "rollbackSubagentSpawn") return this.rollback(params);
    if (!CONTRACT_METHODS.includes(method) || typeof engine[method] !== "function") {
      throw new RpcError(ErrorCode.METHOD_NOT_FOUND, `method not found: ${method}`);
    }
    const args = { ...params };
    const session = { sessionId: args.sessionId, sessionKey: args.sessionKey };
    this.fallbackSessionFile(method, args);
    this.sessions.note(args);
    if (args.runtimeContext && typeof args.runtimeContext === "object") {
      args.runtimeContext = this.withCallbacks(args.runtimeContext, session);
    }
    // OpenClaw passes the run's tool names as a Set.
    if (method === "assemble" && Array.isArray(args.availableTools)) args.availableTools = new Set(args.availableTools);
    if (abortSignal && (method === "compact" || method === "maintain")) args.abortSignal = abortSignal;

    return currentCall.run(session, async () => {
      if (method === "dispose") {
        await engine.dispose();
        await this.stopServices();
        return null;
      }
      const result = await engine[method](args);
      if (method === "prepareSubagentSpawn") return this.keepRollback(result);
      return result === undefined ? null : result;
    });
  }

  // A rollback handle is a function the engine keeps in memory; ctxbridge gets an id for it.
  keepRollback(result) {
    if (result && typeof result.rollback === "function") {
      const rollbackId = `rollback-${randomUUID()}`;
      this.rollbacks.set(rollbackId, result.rollback);
      return { rollbackId };
    }
    if (result && typeof result.rollbackId === "string") return { rollbackId: result.rollbackId };
    return {};
  }

  async rollback({ rollbackId } = {}) {
    const rollback = this.rollbacks.get(rollbackId);
    if (rollback) {
      this.rollbacks.delete(rollbackId);
      await rollback();
      return null;
    }
    if (typeof this.engine.rollbackSubagentSpawn === "function") {
      await this.engine.rollbackSubagentSpawn({ rollbackId });
      return null;
    }
    throw new RpcError(ErrorCode.INVALID_PARAMS, `unknown rollbackId "${rollbackId}"`);
  }

  async stopServices() {
    const services = this.registry.services.splice(0);
    for (const service of services.reverse()) {
      try {
        await service.stop?.(this.serviceContext);
      } catch (error) {
        log(`service ${service.id} failed to stop: ${error?.message ?? error}`);
      }
    }
  }
}
