// OpenClaw's JSONL session transcript format, as its SessionManager writes it (session
// version 4): the first line is the header
//   {"type":"session","version":4,"id":<sessionId>,"timestamp":<ISO>,"cwd":<dir>}
// then one entry per line, each with a fresh `id` and the previous entry's id as `parentId`
// (null for the first):
//   {"type":"message","id":<uuid>,"parentId":<id|null>,"timestamp":<ISO>,"message":<AgentMessage>}
// (other entry types: compaction {summary, firstKeptEntryId, tokensBefore, tokensAfter?},
// custom, custom_message, branch_summary, reset, label, session_info, model_change,
// thinking_level_change). Used for the fallback transcript when ctxbridge passes no
// `sessionFile`.

import { randomUUID } from "node:crypto";
import { appendFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";

export const SESSION_VERSION = 4;

/** Parses a JSONL session file into `{header, entries}`; blank and broken lines are skipped. */
export function readSessionFile(file) {
  const lines = readFileSync(file, "utf8").split("\n");
  let header = null;
  const entries = [];
  for (const line of lines) {
    if (!line.trim()) continue;
    let value;
    try {
      value = JSON.parse(line);
    } catch {
      continue;
    }
    if (value?.type === "session" && header === null) header = value;
    else entries.push(value);
  }
  return { header, entries };
}

/** The messages of a session file, in order (entries of type "message"). */
export function sessionFileMessages(file) {
  return readSessionFile(file).entries.filter((e) => e?.type === "message").map((e) => e.message);
}

/** Creates `file` with a session header if it does not exist yet. */
export function ensureSessionFile(file, sessionId, cwd = process.cwd()) {
  if (existsSync(file)) return;
  mkdirSync(path.dirname(file), { recursive: true });
  const header = { type: "session", version: SESSION_VERSION, id: sessionId, timestamp: new Date().toISOString(), cwd };
  writeFileSync(file, `${JSON.stringify(header)}\n`);
}

/** Appends `messages` as message entries chained to the file's last entry. */
export function appendSessionMessages(file, messages) {
  const { entries } = readSessionFile(file);
  let parentId = entries.length ? (entries[entries.length - 1].id ?? null) : null;
  let text = "";
  for (const message of messages) {
    const id = randomUUID();
    text += `${JSON.stringify({ type: "message", id, parentId, timestamp: new Date().toISOString(), message })}\n`;
    parentId = id;
  }
  if (text) appendFileSync(file, text);
}
