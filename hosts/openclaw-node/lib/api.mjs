// The `api` object a plugin's `register(api)` receives, shaped like `OpenClawPluginApi` of the
// published `openclaw` package's plugin SDK. Served members either work locally (registries,
// config, paths, logging) or become engine -> host requests to ctxbridge (docs/engine-protocol.md#the-engine-process-protocol); every
// other member the SDK declares is present: a registration seam (`register…`, `on…`) accepts
// the call and is reported as registered but not offered, anything else throws "not supported
// by this host: <member>" when called. README.md lists which is which.

import os from "node:os";
import path from "node:path";

import { callHost, currentCall, log } from "./rpc.mjs";
import { accepted, isRegistration, namespace, unsupported } from "./unsupported.mjs";

/** The plugin SDK version whose `OpenClawPluginApi` this host follows. */
export const OPENCLAW_SDK_VERSION = "2026.9.6";

/** Hook names the SDK defines (`PluginHookName`). */
export const HOOK_NAMES = [
  "before_model_resolve", "agent_turn_prepare", "before_prompt_build", "before_agent_reply",
  "model_call_started", "model_call_ended", "llm_input", "llm_output", "before_agent_finalize",
  "agent_end", "before_compaction", "after_compaction", "before_reset", "inbound_claim",
  "channel_pairing_requested", "message_received", "message_sending", "reply_payload_sending",
  "message_sent", "before_tool_call", "after_tool_call", "tool_result_persist",
  "before_message_write", "session_start", "session_end", "subagent_delivery_target",
  "subagent_spawned", "subagent_progress", "subagent_ended", "gateway_start", "gateway_stop",
  "heartbeat_prompt_contribution", "cron_reconciled", "cron_changed", "skill_proposal_evaluate",
  "skill_proposal_changed", "skill_changed", "before_dispatch", "reply_dispatch",
  "before_install", "before_agent_run", "resolve_exec_env",
];

// `OpenClawPluginApi` members this host does not serve (registration seams for channels,
// providers, gateways, UI, …). Present; the registrations among them are accepted and
// reported, the rest fail when called.
const UNSERVED_API_MEMBERS = [
  "registerHook", "registerHttpRoute", "registerHostedMediaResolver", "registerWidgetPresenter",
  "registerMcpServerConnectionResolver", "registerChannel", "registerGatewayMethod",
  "registerGatewayAccessPolicy", "registerBoardWidgetContentKind", "registerSessionCatalog",
  "registerNodeCliFeature", "registerReload", "registerNodeHostCommand",
  "registerNodeInvokePolicy", "registerSecurityAuditCollector", "registerGatewayDiscoveryService",
  "registerCliBackend", "registerTextTransforms", "registerConfigMigration",
  "registerMigrationProvider", "registerAutoEnableProbe", "registerProvider",
  "registerWorkerProvider", "registerModelCatalogProvider", "registerEmbeddingProvider",
  "registerSpeechProvider", "registerRealtimeTranscriptionProvider",
  "registerRealtimeVoiceProvider", "registerMediaUnderstandingProvider",
  "registerTranscriptSourceProvider", "registerImageGenerationProvider",
  "registerVideoGenerationProvider", "registerMusicGenerationProvider",
  "registerWebFetchProvider", "registerWebSearchProvider", "registerInteractiveHandler",
  "onConversationBindingResolved", "registerDecisionProvider", "registerCompactionProvider",
  "registerAgentHarness", "registerCodexAppServerExtensionFactory",
  "registerAgentToolResultMiddleware", "registerSessionExtension", "enqueueNextTurnInjection",
  "registerTrustedToolPolicy", "registerToolMetadata", "registerControlUiDescriptor",
  "registerRuntimeLifecycle", "registerAgentEventSubscription", "emitAgentEvent",
  "setRunContext", "getRunContext", "clearRunContext", "registerSessionSchedulerJob",
  "registerSessionAction", "sendSessionAttachment", "scheduleSessionTurn",
  "unscheduleSessionTurnsByTag", "registerDetachedTaskRuntime", "registerMemoryCapability",
  "registerMemoryPromptSupplement", "registerMemoryPromptPreparation",
  "registerMemoryCorpusSupplement",
];

/** A logger writing `[<name>] level: message` lines to stderr (ctxbridge's engine log). */
export function makeLogger(name) {
  const line = (level) => (message, meta) =>
    log(`[${name}] ${level}: ${message}${meta && Object.keys(meta).length ? ` ${JSON.stringify(meta)}` : ""}`);
  return { debug: line("debug"), info: line("info"), warn: line("warn"), error: line("error") };
}

/** Everything a plugin registered through the api. */
export function makeRegistry() {
  return {
    engines: new Map(), // id -> factory
    tools: [], // {tool?, factory?, opts}
    commands: new Map(), // name -> definition
    hooks: new Map(), // hookName -> [{handler, priority, order}]
    services: [], // OpenClawPluginService
    cli: [], // {registrar, opts}: kept, never run (no `openclaw` CLI here)
    unoffered: new Map(), // seam ("api.registerProvider", "api.on(agent_end)") -> [args of each call]
  };
}

/**
 * Sends `runtime/llmComplete` with everything the caller gave: `messages` (system-role
 * messages are moved into `systemPrompt`, which ctxbridge carries separately), `systemPrompt`,
 * `model`, `purpose`, `maxTokens`, `temperature`, `reasoning`, `responseFormat`, `agentId`,
 * and the session of the call it runs under. Answers an `LlmCompleteResult`.
 */
export async function llmComplete(params = {}, { engineId, session } = {}) {
  const { signal, execution, messages = [], systemPrompt, ...rest } = params;
  signal?.throwIfAborted?.();
  const system = [];
  if (typeof systemPrompt === "string" && systemPrompt) system.push(systemPrompt);
  const conversation = [];
  for (const message of messages) {
    if (message?.role === "system") system.push(typeof message.content === "string" ? message.content : JSON.stringify(message.content));
    else conversation.push(message);
  }
  const call = session ?? currentCall.getStore() ?? {};
  const request = {
    ...(call.sessionId ? { sessionId: call.sessionId } : {}),
    ...(call.sessionKey ? { sessionKey: call.sessionKey } : {}),
    ...rest,
    messages: conversation,
    ...(system.length ? { systemPrompt: system.join("\n\n") } : {}),
  };
  const pending = callHost("runtime/llmComplete", request);
  const result = await (signal
    ? Promise.race([pending, new Promise((_, reject) => signal.addEventListener("abort", () => reject(signal.reason ?? new Error("aborted")), { once: true }))])
    : pending);
  const model = result?.model ?? rest.model ?? "unknown";
  return {
    provider: "ctxbridge",
    agentId: rest.agentId ?? "main",
    usage: {},
    execution: { mode: "direct-provider", owner: { kind: "provider", id: "ctxbridge" } },
    audit: { caller: { kind: "context-engine", id: engineId }, purpose: rest.purpose, sessionKey: call.sessionKey },
    ...result,
    model,
    text: typeof result?.text === "string" ? result.text : "",
  };
}

/** The host's record of sessions it has been told about (served session-store helpers). */
export function makeSessionIndex() {
  const byKey = new Map(); // sessionKey -> entry
  return {
    note({ sessionId, sessionKey, sessionFile }) {
      if (!sessionId) return;
      const key = sessionKey ?? sessionId;
      const entry = byKey.get(key) ?? { sessionId };
      entry.sessionId = sessionId;
      if (sessionFile) entry.sessionFile = sessionFile;
      entry.updatedAt = Date.now();
      byKey.set(key, entry);
    },
    get: (sessionKey) => byKey.get(sessionKey),
    list: () => [...byKey].map(([sessionKey, entry]) => ({ sessionKey, entry: { ...entry } })),
  };
}

/**
 * Builds `api`. `ctx`: {pluginId, pluginName, version, description, source, rootDir,
 * pluginConfig, openclawConfig, dirs: {stateDir, agentDir, workspaceDir}, engineId, registry,
 * sessions}.
 */
export function makeApi(ctx) {
  const { registry, dirs, sessions } = ctx;
  const logger = makeLogger(ctx.pluginId);
  const accept = { unoffered: registry.unoffered, logInfo: (message) => logger.info(message) };
  // The hooks ctxbridge fires (initialize's `host.hooks`); an older ctxbridge that does not say
  // is taken to fire every hook.
  const firedHooks = Array.isArray(ctx.firedHooks) ? new Set(ctx.firedHooks) : null;
  const storePath = path.join(dirs.stateDir, "sessions");
  const config = ctx.openclawConfig;

  const runtime = {
    version: OPENCLAW_SDK_VERSION,
    decisions: namespace("runtime.decisions", ["evaluate"]),
    config: namespace("runtime.config", ["current", "loadConfig", "mutateConfigFile", "replaceConfigFile", "writeConfigFile"], {
      current: () => config,
      loadConfig: () => config,
    }),
    agent: namespace(
      "runtime.agent",
      ["defaults", "resolveAgentDir", "resolveAgentWorkspaceDir", "resolveAgentIdentity", "resolveSessionCatalogCreateTarget",
        "resolveThinkingDefault", "normalizeThinkingLevel", "resolveThinkingPolicy", "runCommandFromIngress", "runEmbeddedAgent",
        "resolveAgentTimeoutMs", "resolveCliBackendDispatchEligibility", "ensureAgentWorkspace", "session"],
      {
        defaults: { model: ctx.model ?? "default", provider: "ctxbridge" },
        resolveAgentDir: () => dirs.agentDir,
        resolveAgentWorkspaceDir: () => dirs.workspaceDir ?? process.cwd(),
        session: namespace(
          "runtime.agent.session",
          ["resolveStorePath", "createSessionEntry", "getSessionEntry", "listSessionEntries", "patchSessionEntry",
            "upsertSessionEntry", "runWithWorkAdmission", "updateSessionStoreEntry"],
          {
            resolveStorePath: () => storePath,
            getSessionEntry: ({ sessionKey } = {}) => sessions.get(sessionKey),
            listSessionEntries: () => sessions.list(),
          },
        ),
      },
    ),
    hooks: namespace("runtime.hooks", ["dispatchHookAgentTurn"]),
    system: namespace("runtime.system", ["enqueueSystemEvent", "requestHeartbeat", "requestHeartbeatNow", "runHeartbeatOnce", "runCommandWithTimeout", "formatNativeDependencyHint"]),
    media: namespace("runtime.media", ["loadWebMedia", "detectMime", "mediaKindFromMime", "isVoiceCompatibleAudio", "getImageMetadata", "resizeToJpeg"]),
    tts: namespace("runtime.tts", ["prepareTtsRequest", "textToSpeech", "textToSpeechStream", "textToSpeechTelephony", "listVoices"]),
    mediaUnderstanding: namespace("runtime.mediaUnderstanding", ["resolveAudioInputBudget", "runFile", "describeImageFile", "describeImageFileWithModel", "extractStructuredWithModel", "describeVideoFile", "transcribeAudioFile"]),
    imageGeneration: namespace("runtime.imageGeneration", ["generate", "listProviders"]),
    videoGeneration: namespace("runtime.videoGeneration", ["generate", "listProviders"]),
    musicGeneration: namespace("runtime.musicGeneration", ["generate", "listProviders"]),
    webSearch: namespace("runtime.webSearch", ["listProviders", "search"]),
    events: namespace("runtime.events", ["onAgentEvent", "onSessionTranscriptUpdate"]),
    logging: namespace("runtime.logging", ["shouldLogVerbose", "getChildLogger"], {
      shouldLogVerbose: () => process.env.OPENCLAW_VERBOSE === "1",
      getChildLogger: (bindings) => makeLogger(bindings?.name ? `${ctx.pluginId}:${bindings.name}` : ctx.pluginId),
    }),
    state: namespace("runtime.state", ["resolveStateDir", "openBlobStore", "openKeyedStore", "openSyncKeyedStore", "openChannelIngressQueue", "openChannelIngressDrain"], {
      resolveStateDir: () => dirs.stateDir,
    }),
    tasks: namespace("runtime.tasks", ["async", "runs", "flows", "managedFlows"]),
    llm: namespace("runtime.llm", ["complete", "acquireLocalService"], {
      complete: (params) => llmComplete(params, { engineId: ctx.engineId }),
    }),
    modelConfig: namespace("runtime.modelConfig", ["resolveDefaultModelForAgent", "resolveAllowedModelRef", "resolveModelRuntimePolicy"]),
    modelAuth: namespace("runtime.modelAuth", ["resolveProviderIdForAuth", "ensureAuthProfileStore", "resolveAuthProfileOrder", "listProfilesForProvider", "isProviderApiKeyConfigured", "getApiKeyForModel", "getRuntimeAuthForModel", "resolveApiKeyForProvider"]),
    gateway: namespace("runtime.gateway", ["isAvailable", "request"], {
      // There is no OpenClaw gateway behind this host.
      isAvailable: async () => false,
    }),
    subagent: namespace("runtime.subagent", ["complete", "run", "waitForRun", "getSessionMessages", "deleteSession"], {
      // Fresh, tool-free inference: one user message through ctxbridge's model.
      complete: async ({ message, extraSystemPrompt, model, signal, agentId } = {}) => {
        const result = await llmComplete(
          { messages: [{ role: "user", content: String(message ?? "") }], systemPrompt: extraSystemPrompt, model, signal, agentId, purpose: "subagent.complete" },
          { engineId: ctx.engineId },
        );
        return { text: result.text };
      },
    }),
    nodes: namespace("runtime.nodes", ["list", "invoke", "openDuplex"]),
    sandbox: namespace("runtime.sandbox", ["resolveWorkspaceAuthority", "prepareWorkspaceAuthority"]),
    worktrees: namespace("runtime.worktrees", ["resolveCheckoutRoot", "hasSelfContainedCheckoutMetadata", "create", "release", "removeIfLossless"]),
    channel: namespace(
      "runtime.channel",
      ["text", "reply", "routing", "pairing", "media", "activity", "session", "mentions", "reactions", "groups", "debounce",
        "commands", "outbound", "inbound", "turn", "threadBindings", "runtimeContexts"],
      {
        session: namespace(
          "runtime.channel.session",
          ["resolveStorePath", "readSessionUpdatedAt", "recordSessionMetaFromInbound", "recordInboundSession", "updateLastRoute"],
          {
            resolveStorePath: () => storePath,
            readSessionUpdatedAt: ({ sessionKey } = {}) => sessions.get(sessionKey)?.updatedAt,
          },
        ),
      },
    ),
  };

  const served = {
    id: ctx.pluginId,
    name: ctx.pluginName ?? ctx.pluginId,
    version: ctx.version,
    description: ctx.description,
    source: ctx.source,
    runtimeSource: ctx.source,
    rootDir: ctx.rootDir,
    registrationMode: "full",
    config,
    pluginConfig: ctx.pluginConfig,
    runtime,
    logger,
    resolvePath: (input) => {
      const text = String(input);
      if (text === "~" || text.startsWith("~/")) return path.join(os.homedir(), text.slice(1));
      return path.resolve(ctx.rootDir ?? process.cwd(), text);
    },
    registerContextEngine(id, factory) {
      if (id === "legacy") throw new Error('the context engine id "legacy" belongs to the core');
      if (typeof factory !== "function") throw new Error(`context engine "${id}": factory is not a function`);
      registry.engines.set(id, factory);
    },
    registerTool(tool, opts = {}) {
      if (typeof tool === "function") registry.tools.push({ factory: tool, opts });
      else if (tool && typeof tool === "object" && tool.contextVersion === 2 && typeof tool.create === "function") {
        registry.tools.push({ factory: tool.create, opts });
      } else if (tool && typeof tool === "object" && typeof tool.name === "string" && typeof tool.execute === "function") {
        registry.tools.push({ tool, opts });
      } else {
        throw new Error("registerTool: expected a tool {name, description, parameters, execute} or a tool factory");
      }
    },
    registerCommand(command) {
      if (!command || typeof command.name !== "string" || typeof command.handler !== "function") {
        throw new Error("registerCommand: expected {name, description, handler}");
      }
      registry.commands.set(command.name.replace(/^\//, ""), command);
      // `nativeNames` ({default: "lossless", telegram: …}) are the names the command goes by
      // on native command surfaces; this host has one surface, so each is an alias.
      const native = command.nativeNames;
      const aliases = typeof native === "string" ? [native] : Array.isArray(native) ? native : Object.values(native ?? {});
      for (const alias of aliases) {
        if (typeof alias !== "string" || !alias.trim()) continue;
        const name = alias.trim().replace(/^\//, "");
        if (!registry.commands.has(name)) registry.commands.set(name, command);
      }
    },
    // OpenClaw runs CLI registrars only in its own command-line program, never in the gateway
    // that serves context engines; this host has no such program, so it keeps them unrun.
    registerCli(registrar, opts = {}) {
      if (typeof registrar !== "function") throw new Error("registerCli: expected a registrar function");
      registry.cli.push({ registrar, opts });
      const names = Array.isArray(opts?.commands) ? ` (${opts.commands.join(", ")})` : "";
      logger.info(`CLI commands${names} registered; this host has no CLI, so they are not offered`);
    },
    registerService(service) {
      if (!service || typeof service.start !== "function") throw new Error("registerService: expected {id, start, stop?}");
      registry.services.push(service);
    },
    on(hookName, handler, opts = {}) {
      if (!HOOK_NAMES.includes(hookName)) logger.warn(`unknown hook "${hookName}" registered; it will never fire`);
      if (typeof handler !== "function") throw new Error(`on("${hookName}"): handler is not a function`);
      if (firedHooks && !firedHooks.has(hookName)) accepted(`api.on(${hookName})`, registry.unoffered, accept.logInfo)();
      const list = registry.hooks.get(hookName) ?? [];
      list.push({ handler, priority: Number(opts.priority ?? 0), order: list.length });
      // Higher priority runs first; equal priorities keep registration order.
      list.sort((a, b) => b.priority - a.priority || a.order - b.order);
      registry.hooks.set(hookName, list);
    },
  };

  const api = { ...served };
  for (const name of UNSERVED_API_MEMBERS) {
    api[name] = isRegistration(name) ? accepted(`api.${name}`, registry.unoffered, accept.logInfo) : unsupported(`api.${name}`);
  }
  api.session = {
    state: namespace("api.session.state", ["registerSessionExtension"], {}, accept),
    workflow: namespace("api.session.workflow", ["enqueueNextTurnInjection", "registerSessionSchedulerJob", "sendSessionAttachment", "scheduleSessionTurn", "unscheduleSessionTurnsByTag"], {}, accept),
    controls: namespace("api.session.controls", ["registerSessionAction", "registerControlUiDescriptor"], {}, accept),
  };
  api.agent = { events: namespace("api.agent.events", ["registerAgentEventSubscription", "emitAgentEvent"], {}, accept) };
  api.runContext = namespace("api.runContext", ["setRunContext", "getRunContext", "clearRunContext"]);
  api.lifecycle = namespace("api.lifecycle", ["registerRuntimeLifecycle"], {}, accept);
  return api;
}

/** Lists of api members for the README and tests: which are served, which are not. */
export const API_MEMBERS = { unserved: UNSERVED_API_MEMBERS };
