#!/usr/bin/env node
// Serves a context engine written as an OpenClaw plugin over the ctxbridge engine process
// protocol (SPEC §13): JSON-RPC 2.0, one object per line, on stdin/stdout; stderr is the log.
//
//   node host.mjs path/to/plugin/index.mjs
//
// The plugin module is written to the OpenClaw plugin API:
//
//   export default function register(api) {
//     api.registerContextEngine("my-engine", (ctx) => engine);
//   }
//
// where ctx = {config, agentDir, workspaceDir} and `engine` has `info` and async methods named
// as in the contract (ingest, assemble, compact, and any optional ones). Node 20, no
// dependencies.

import { createInterface } from "node:readline";
import path from "node:path";
import { pathToFileURL } from "node:url";

const CONTRACT_METHODS = [
  "ingest",
  "assemble",
  "compact",
  "bootstrap",
  "maintain",
  "ingestBatch",
  "afterTurn",
  "commitTurn",
  "prepareSubagentSpawn",
  "rollbackSubagentSpawn",
  "onSubagentEnded",
  "dispose",
];

// stdout is the protocol channel: anything a plugin logs goes to stderr instead.
const log = (...parts) => process.stderr.write(`${parts.join(" ")}\n`);
console.log = console.info = console.debug = (...parts) => console.error(...parts);

const pluginPath = process.argv[2];
if (!pluginPath) {
  log("usage: node host.mjs <plugin module>");
  process.exit(2);
}

function send(message) {
  process.stdout.write(`${JSON.stringify({ jsonrpc: "2.0", ...message })}\n`);
}

function sendError(id, code, message, data) {
  send({ id, error: data === undefined ? { code, message } : { code, message, data } });
}

class RpcError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

// ---- engine -> host requests (runtimeContext callbacks) -----------------------------------

let nextHostRequestId = 1;
const hostRequests = new Map(); // id -> {resolve, reject}

function callHost(method, params) {
  const id = `host-${nextHostRequestId++}`;
  return new Promise((resolve, reject) => {
    hostRequests.set(id, { resolve, reject });
    send({ id, method, params });
  });
}

// Turns the serialised runtimeContext facts back into the object an OpenClaw engine expects,
// with callbacks that become engine -> host requests naming the call's session.
function withCallbacks(runtimeContext, sessionId) {
  return {
    ...runtimeContext,
    rewriteTranscriptEntries: (request) =>
      callHost("runtime/rewriteTranscriptEntries", { sessionId, ...request }),
    llm: {
      complete: (params) => callHost("runtime/llmComplete", { sessionId, ...params }),
    },
    delegateCompaction: (params) =>
      callHost("runtime/delegateCompaction", { ...params, sessionId: params?.sessionId ?? sessionId }),
  };
}

// ---- plugin loading ------------------------------------------------------------------------

async function loadEngine(params) {
  const module = await import(pathToFileURL(path.resolve(pluginPath)).href);
  const register = module.default ?? module.register;
  if (typeof register !== "function") {
    throw new RpcError(-32000, `${pluginPath} has no default export register(api)`);
  }
  const factories = new Map();
  const api = {
    id: params.engineId,
    pluginConfig: params.config ?? {},
    logger: { info: log, warn: log, error: log, debug: log },
    registerContextEngine(id, factory) {
      if (id === "legacy") throw new Error('the id "legacy" belongs to the core');
      if (typeof factory !== "function") throw new Error(`engine ${id}: factory is not a function`);
      factories.set(id, factory);
    },
  };
  await register(api);
  let id = params.engineId;
  if (!factories.has(id)) {
    if (factories.size !== 1) {
      throw new RpcError(
        -32000,
        `plugin registers [${[...factories.keys()].join(", ")}], none of them "${params.engineId}"`,
      );
    }
    [id] = factories.keys();
    log(`engine id "${params.engineId}" not registered; serving the only engine, "${id}"`);
  }
  const engine = await factories.get(id)({
    config: params.config ?? {},
    agentDir: params.agentDir,
    workspaceDir: params.workspaceDir,
  });
  if (!engine || typeof engine !== "object") {
    throw new RpcError(-32000, `the factory of "${id}" returned no engine object`);
  }
  return engine;
}

// ---- lifecycle requests --------------------------------------------------------------------

let enginePromise = null; // set by initialize; later requests wait for it
const inFlight = new Map(); // request id -> AbortController (compact only)
let openRequests = 0;
let stdinClosed = false;

async function handleRequest(id, method, params = {}) {
  if (method === "initialize") {
    enginePromise = loadEngine(params);
    const engine = await enginePromise;
    const info = typeof engine.info === "function" ? await engine.info() : engine.info;
    // Every contract member the object has, required ones included: ctxbridge then takes the
    // list exactly and its contract validation names anything missing.
    const methods = CONTRACT_METHODS.filter((name) => typeof engine[name] === "function");
    return { protocolVersion: 1, info, methods };
  }
  if (!enginePromise) throw new RpcError(-32002, "not initialized");
  const engine = await enginePromise;
  if (!CONTRACT_METHODS.includes(method) || typeof engine[method] !== "function") {
    throw new RpcError(-32601, `method not found: ${method}`);
  }
  const args = { ...params };
  if (args.runtimeContext && typeof args.runtimeContext === "object") {
    args.runtimeContext = withCallbacks(args.runtimeContext, args.sessionId);
  }
  if (method === "compact") {
    const controller = new AbortController();
    inFlight.set(id, controller);
    args.abortSignal = controller.signal;
  }
  try {
    const result = method === "dispose" ? await engine.dispose() : await engine[method](args);
    return result === undefined ? null : result;
  } finally {
    inFlight.delete(id);
  }
}

function onMessage(message) {
  const { id, method, params } = message;
  if (method === undefined) {
    // A response to one of our engine -> host requests.
    const waiter = hostRequests.get(id);
    if (!waiter) return;
    hostRequests.delete(id);
    if (message.error) {
      waiter.reject(new Error(message.error.message));
    } else {
      waiter.resolve(message.result);
    }
    return;
  }
  if (id === undefined || id === null) {
    if (method === "$/cancelRequest") inFlight.get(params?.id)?.abort();
    return;
  }
  // Not awaited: requests of different sessions run concurrently, answered by id.
  openRequests += 1;
  handleRequest(id, method, params)
    .then(
      (result) => send({ id, result }),
      (error) => {
        log(`${method} failed:`, error instanceof RpcError ? error.message : (error?.stack ?? String(error)));
        sendError(id, error instanceof RpcError ? error.code : -32000, error?.message ?? String(error));
      },
    )
    .finally(() => {
      openRequests -= 1;
      exitIfDone();
    });
}

function exitIfDone() {
  if (stdinClosed && openRequests === 0) process.exit(0);
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", (line) => {
  if (!line.trim()) return;
  let message;
  try {
    message = JSON.parse(line);
  } catch (error) {
    log("ignoring a line that is not JSON:", error.message);
    return;
  }
  onMessage(message);
});
// stdin closing is the host telling us to go (after dispose, or at shutdown): finish what is
// in flight, then exit.
lines.on("close", () => {
  stdinClosed = true;
  exitIfDone();
});
