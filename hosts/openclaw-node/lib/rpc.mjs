// JSON-RPC 2.0 over stdio, one object per line (docs/engine-protocol.md#the-engine-process-protocol): sending, engine -> host requests,
// and the error type whose code reaches ctxbridge.

import { AsyncLocalStorage } from "node:async_hooks";

/** A JSON-RPC error with a code (and optional data) for ctxbridge. */
export class RpcError extends Error {
  constructor(code, message, data) {
    super(message);
    this.code = code;
    if (data !== undefined) this.data = data;
  }
}

/** JSON-RPC error codes this host answers with. */
export const ErrorCode = {
  METHOD_NOT_FOUND: -32601,
  INVALID_PARAMS: -32602,
  ENGINE_FAILED: -32000,
  NOT_INITIALIZED: -32002,
  /** The entry's `config` does not satisfy the plugin's `configSchema`; `data.errors` names each key. */
  CONFIG_INVALID: -32010,
};

/** The error a present-but-unserved api member throws when it is called. */
export class NotSupportedError extends Error {
  constructor(member) {
    super(`not supported by this host: ${member}`);
    this.name = "NotSupportedError";
    this.member = member;
  }
}

/** Writes log lines to stderr (stdout is the protocol channel). */
export const log = (...parts) => process.stderr.write(`${parts.map(String).join(" ")}\n`);

export function send(message) {
  process.stdout.write(`${JSON.stringify({ jsonrpc: "2.0", ...message })}\n`);
}

export function sendError(id, code, message, data) {
  send({ id, error: data === undefined ? { code, message } : { code, message, data } });
}

/**
 * The call a piece of plugin code runs under: `{sessionId, sessionKey}` of the lifecycle
 * request, tool call or hook being served. Engine -> host requests made from inside it (for
 * example `api.runtime.llm.complete` called during `assemble`) name that session.
 */
export const currentCall = new AsyncLocalStorage();

let nextHostRequestId = 1;
const hostRequests = new Map(); // id -> {resolve, reject}

/** Sends an engine -> host request and resolves with its result. */
export function callHost(method, params) {
  const id = `host-${nextHostRequestId++}`;
  return new Promise((resolve, reject) => {
    hostRequests.set(id, { resolve, reject });
    send({ id, method, params });
  });
}

/** Settles a pending engine -> host request from ctxbridge's response; false if unknown. */
export function settleHostRequest(message) {
  const waiter = hostRequests.get(message.id);
  if (!waiter) return false;
  hostRequests.delete(message.id);
  if (message.error) {
    const error = new Error(message.error.message ?? "host request failed");
    error.code = message.error.code;
    error.data = message.error.data;
    waiter.reject(error);
  } else {
    waiter.resolve(message.result);
  }
  return true;
}
