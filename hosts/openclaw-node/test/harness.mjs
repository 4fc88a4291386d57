// Drives host.mjs over stdio the way ctxbridge does (docs/engine-protocol.md#the-engine-process-protocol): JSON-RPC requests in, results
// and engine -> host requests out. Engine -> host requests are answered by a handler the test
// gives and recorded.

import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export const HOST_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
export const HOST = path.join(HOST_DIR, "host.mjs");
export const EXAMPLES = path.resolve(HOST_DIR, "..", "..", "examples");

/** The pinned Node (package.json here) when installed, else the one running the tests. */
export function pinnedNode() {
  const local = path.join(HOST_DIR, "node_modules", ".bin", "node");
  return existsSync(local) ? local : process.execPath;
}

/** The machine's own `node` (first on PATH), which the sample plugin must keep working on. */
export function machineNode() {
  const found = spawnSync("sh", ["-c", "command -v node"], { encoding: "utf8" }).stdout.trim();
  return found || process.execPath;
}

/** `[major, minor]` of a Node binary. */
export function nodeVersion(bin) {
  const out = spawnSync(bin, ["-p", "process.versions.node"], { encoding: "utf8" }).stdout.trim();
  const [major, minor] = out.split(".").map(Number);
  return [major, minor];
}

export const supportsSqlite = (bin) => {
  const [major, minor] = nodeVersion(bin);
  return major > 22 || (major === 22 && minor >= 5);
};

/** A fresh directory under the OS temp dir for one test. */
export const scratch = (name) => mkdtempSync(path.join(os.tmpdir(), `ctxbridge-host-${name}-`));

/**
 * Starts the host on `plugin` with `node`. `onHostRequest(method, params)` answers engine ->
 * host requests (its return value is the result; a throw becomes a JSON-RPC error).
 */
const live = new Set();

/** Kills every host still running (a test that failed mid-way leaves its host open); call from `after`. */
export function stopAll() {
  for (const child of live) child.kill();
  live.clear();
}

export function startHost({ plugin, node = pinnedNode(), env = {}, cwd, onHostRequest = () => null }) {
  const child = spawn(node, [HOST, plugin], {
    cwd,
    env: { ...process.env, ...env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  live.add(child);
  child.on("exit", () => live.delete(child));
  let stderr = "";
  child.stderr.on("data", (chunk) => {
    stderr += chunk;
  });
  const pending = new Map();
  const hostRequests = [];
  const notifications = [];
  let nextId = 1;
  const write = (message) => child.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", ...message })}\n`);
  createInterface({ input: child.stdout }).on("line", async (line) => {
    const message = JSON.parse(line);
    if (message.method !== undefined && message.id !== undefined) {
      hostRequests.push({ method: message.method, params: message.params });
      try {
        write({ id: message.id, result: await onHostRequest(message.method, message.params) });
      } catch (error) {
        write({ id: message.id, error: { code: -32000, message: error.message } });
      }
      return;
    }
    if (message.method !== undefined) {
      notifications.push(message);
      return;
    }
    const waiter = pending.get(message.id);
    pending.delete(message.id);
    waiter?.(message);
  });
  const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
  return {
    hostRequests,
    notifications,
    get stderr() {
      return stderr;
    },
    /** Sends a request; resolves with the whole response (`{result}` or `{error}`). */
    request(method, params) {
      const id = nextId++;
      return new Promise((resolve) => {
        pending.set(id, resolve);
        write({ id, method, params });
      });
    },
    /** Sends a request and resolves with its result; rejects with the error (and stderr). */
    async call(method, params) {
      const response = await this.request(method, params);
      if (response.error) throw new Error(`${method}: ${response.error.message}\n--- host stderr ---\n${stderr}`);
      return response.result;
    },
    notify(method, params) {
      write({ method, params });
    },
    /** Closes stdin (ctxbridge's "go") and resolves with the exit code. */
    async close() {
      child.stdin.end();
      return exited;
    },
  };
}

export const initializeParams = (engineId, config = {}, extra = {}) => ({
  protocolVersion: 1,
  host: { id: "test", label: "test host", capabilities: ["bootstrap", "assemble-before-prompt", "after-turn", "maintain", "compact", "runtime-llm-complete"] },
  engineId,
  config,
  ...extra,
});
