#!/usr/bin/env node
// Serves an OpenClaw context-engine plugin, as published, over the ctxbridge engine process
// protocol (docs/engine-protocol.md#the-engine-process-protocol): JSON-RPC 2.0, one object per line, on stdin/stdout; stderr is the log.
//
//   node host.mjs path/to/plugin        (a module file, ESM or CommonJS, or a package dir)
//
// The plugin's entry is a bare `register(api)` function or a plugin object
// `{id, name, configSchema, register}`; `api` follows `OpenClawPluginApi` of the `openclaw`
// plugin SDK (see README.md for which members this host serves). Runs on Node >= 20; plugins
// that use `node:sqlite` need Node >= 22.5 (package.json here installs a pinned one).

import { register as registerLoaderHooks } from "node:module";

import { ErrorCode, log, RpcError, send, sendError, settleHostRequest } from "./lib/rpc.mjs";
import { PluginServer } from "./lib/serve.mjs";
import { createInterface } from "node:readline";

// stdout is the protocol channel: anything a plugin logs goes to stderr instead.
console.log = console.info = console.debug = (...parts) => console.error(...parts);

// `import … from "openclaw/plugin-sdk/…"` resolves to the real package when installed, else
// to this host's helpers.
registerLoaderHooks("./lib/resolve-openclaw.mjs", import.meta.url);

const pluginPath = process.argv[2];
if (!pluginPath) {
  log("usage: node host.mjs <plugin module or package dir>");
  process.exit(2);
}

const server = new PluginServer(pluginPath);
let ready = null; // the initialize promise; later requests wait for it
const inFlight = new Map(); // request id -> AbortController
let openRequests = 0;
let stdinClosed = false;

async function handleRequest(id, method, params = {}) {
  if (method === "initialize") {
    ready = server.initialize(params);
    return ready;
  }
  if (!ready) throw new RpcError(ErrorCode.NOT_INITIALIZED, "not initialized");
  await ready;
  if (method === "tools/call") return server.callTool(params);
  if (method === "commands/call") return server.callCommand(params);
  if (method.startsWith("hooks/")) return server.runHook(method.slice("hooks/".length), params);
  const controller = new AbortController();
  inFlight.set(id, controller);
  try {
    return await server.lifecycle(method, params, controller.signal);
  } finally {
    inFlight.delete(id);
  }
}

function onMessage(message) {
  const { id, method, params } = message;
  if (method === undefined) {
    settleHostRequest(message); // a response to one of our engine -> host requests
    return;
  }
  if (id === undefined || id === null) {
    if (method === "$/cancelRequest") inFlight.get(params?.id)?.abort();
    else if (method.startsWith("hooks/")) {
      // A hook sent as a notification: run it, report failures in the log only.
      openRequests += 1;
      Promise.resolve(ready)
        .then(() => server.runHook(method.slice("hooks/".length), params))
        .catch((error) => log(`${method} failed:`, error?.stack ?? String(error)))
        .finally(() => {
          openRequests -= 1;
          exitIfDone();
        });
    }
    return;
  }
  // Not awaited: requests of different sessions run concurrently, answered by id.
  openRequests += 1;
  handleRequest(id, method, params)
    .then(
      (result) => send({ id, result: result === undefined ? null : result }),
      (error) => {
        log(`${method} failed:`, error instanceof RpcError ? error.message : (error?.stack ?? String(error)));
        sendError(id, error instanceof RpcError ? error.code : ErrorCode.ENGINE_FAILED, error?.message ?? String(error), error?.data);
      },
    )
    .finally(() => {
      openRequests -= 1;
      exitIfDone();
    });
}

let exiting = false;
function exitIfDone() {
  if (!stdinClosed || openRequests !== 0 || exiting) return;
  exiting = true;
  server.stopServices().finally(() => process.exit(0));
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
// stdin closing is ctxbridge telling us to go (after dispose, or at shutdown): finish what is
// in flight, stop the plugin's services, then exit.
lines.on("close", () => {
  stdinClosed = true;
  exitIfDone();
});
