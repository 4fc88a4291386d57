// "session-summary": an OpenClaw context-engine plugin written only against the published
// plugin API (the `openclaw` package's plugin SDK), with nothing specific to ctxbridge.
//
// - The entry is a plugin object (`definePluginEntry`) with a `configSchema`.
// - Messages are stored in SQLite (`node:sqlite`, Node >= 22.5) at
//   `api.resolvePath(config.dbPath)` (default `~/.session-summary/summary.sqlite`).
// - `bootstrap` imports the session's history from the JSONL `sessionFile`.
// - `assemble` shows the newest `keepRecent` messages; older ones are replaced by a summary
//   written by the host's model through `api.runtime.llm.complete` (with a system prompt).
// - `compact` folds everything but the newest `keepRecent` messages into the summary.
// - Tool `session_recall` searches the stored messages (the model calls it).
// - Hook `before_prompt_build` adds plugin guidance and the current summary; `session_end`
//   forgets a session; `gateway_stop` closes the database.
// - Command `/summary` shows the current summary.
// - `prepareSubagentSpawn` records the child and returns a rollback handle.

import { mkdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";

import { definePluginEntry } from "openclaw/plugin-sdk/plugin-entry";

const ENGINE_ID = "session-summary";

const DEFAULTS = { keepRecent: 6, summaryMaxTokens: 200, dbPath: "~/.session-summary/summary.sqlite" };

// A Zod-like schema (the SDK's `OpenClawPluginConfigSchema.safeParse`).
const configSchema = {
  safeParse(value) {
    const input = value ?? {};
    const issues = [];
    if (typeof input !== "object" || Array.isArray(input)) {
      return { success: false, error: { issues: [{ path: [], message: "expected an object" }] } };
    }
    const known = new Set(Object.keys(DEFAULTS));
    for (const key of Object.keys(input)) {
      if (!known.has(key)) issues.push({ path: [key], message: "unknown key" });
    }
    for (const [key, min] of [["keepRecent", 1], ["summaryMaxTokens", 16]]) {
      if (key in input && !(Number.isInteger(input[key]) && input[key] >= min)) {
        issues.push({ path: [key], message: `must be an integer >= ${min}` });
      }
    }
    if ("dbPath" in input && (typeof input.dbPath !== "string" || !input.dbPath)) {
      issues.push({ path: ["dbPath"], message: "must be a non-empty string" });
    }
    if (issues.length) return { success: false, error: { issues } };
    return { success: true, data: { ...DEFAULTS, ...input } };
  },
  jsonSchema: {
    type: "object",
    additionalProperties: false,
    properties: {
      keepRecent: { type: "integer", minimum: 1, default: DEFAULTS.keepRecent },
      summaryMaxTokens: { type: "integer", minimum: 16, default: DEFAULTS.summaryMaxTokens },
      dbPath: { type: "string", default: DEFAULTS.dbPath },
    },
  },
};

const SUMMARY_SYSTEM_PROMPT =
  "You summarise conversations. Keep names, numbers, decisions and open questions. Answer with the summary only.";

const textOf = (message) => {
  if (typeof message?.content === "string") return message.content;
  if (Array.isArray(message?.content)) {
    return message.content.filter((p) => p?.type === "text").map((p) => p.text).join(" ");
  }
  return message?.summary ?? "";
};

export default definePluginEntry({
  id: ENGINE_ID,
  name: "Session Summary",
  description: "Keeps recent messages verbatim and a model-written summary of the rest.",
  configSchema,
  register(api) {
    const config = { ...DEFAULTS, ...(api.pluginConfig ?? {}) };
    const log = api.runtime.logging.getChildLogger({ name: "store" });
    let db = null;

    const open = () => {
      if (db) return db;
      const file = api.resolvePath(config.dbPath);
      mkdirSync(path.dirname(file), { recursive: true });
      db = new DatabaseSync(file);
      db.exec(`
        CREATE TABLE IF NOT EXISTS messages (session_id TEXT, seq INTEGER, msg_id TEXT, role TEXT, text TEXT, json TEXT,
          PRIMARY KEY (session_id, seq));
        CREATE UNIQUE INDEX IF NOT EXISTS messages_id ON messages (session_id, msg_id) WHERE msg_id IS NOT NULL;
        CREATE TABLE IF NOT EXISTS summaries (session_id TEXT PRIMARY KEY, summary TEXT, covered INTEGER);
        CREATE TABLE IF NOT EXISTS children (child_session_key TEXT PRIMARY KEY, parent_session_key TEXT);
      `);
      log.info(`database at ${file}`);
      return db;
    };

    const count = (sessionId) =>
      open().prepare("SELECT COUNT(*) AS n FROM messages WHERE session_id = ?").get(sessionId).n;

    const store = (sessionId, message) => {
      const d = open();
      if (message.id && d.prepare("SELECT 1 FROM messages WHERE session_id = ? AND msg_id = ?").get(sessionId, message.id)) {
        return false;
      }
      d.prepare("INSERT INTO messages (session_id, seq, msg_id, role, text, json) VALUES (?, ?, ?, ?, ?, ?)").run(
        sessionId, count(sessionId), message.id ?? null, message.role ?? "user", textOf(message), JSON.stringify(message),
      );
      return true;
    };

    const messagesOf = (sessionId) =>
      open().prepare("SELECT json FROM messages WHERE session_id = ? ORDER BY seq").all(sessionId).map((r) => JSON.parse(r.json));

    const summaryOf = (sessionId) =>
      open().prepare("SELECT summary, covered FROM summaries WHERE session_id = ?").get(sessionId) ?? null;

    // Summarises messages [0, upTo) of the session through the host's model.
    const summarise = async (sessionId, upTo) => {
      const previous = summaryOf(sessionId);
      if (previous && previous.covered >= upTo) return previous;
      const all = messagesOf(sessionId).slice(previous?.covered ?? 0, upTo);
      const transcript = all.map((m) => `${m.role}: ${textOf(m)}`).join("\n");
      const prompt = previous
        ? `Earlier summary:\n${previous.summary}\n\nMore conversation:\n${transcript}\n\nWrite the updated summary.`
        : `Conversation:\n${transcript}\n\nWrite the summary.`;
      const result = await api.runtime.llm.complete({
        messages: [{ role: "user", content: prompt }],
        systemPrompt: SUMMARY_SYSTEM_PROMPT,
        maxTokens: config.summaryMaxTokens,
        purpose: "session-summary: summarise older messages",
      });
      const row = { summary: result.text.trim(), covered: upTo };
      open()
        .prepare("INSERT INTO summaries (session_id, summary, covered) VALUES (?, ?, ?) ON CONFLICT(session_id) DO UPDATE SET summary = excluded.summary, covered = excluded.covered")
        .run(sessionId, row.summary, row.covered);
      return row;
    };

    api.registerContextEngine(ENGINE_ID, () => ({
      info: { id: ENGINE_ID, name: "Session Summary", version: "1.0.0", ownsCompaction: true },

      async bootstrap({ sessionId, sessionFile }) {
        if (count(sessionId) > 0) return { bootstrapped: false, reason: "already bootstrapped" };
        let imported = 0;
        for (const line of readFileSync(sessionFile, "utf8").split("\n")) {
          if (!line.trim()) continue;
          const entry = JSON.parse(line);
          if (entry.type === "message" && entry.message) imported += store(sessionId, { id: entry.id, ...entry.message }) ? 1 : 0;
        }
        return { bootstrapped: true, importedMessages: imported };
      },

      async ingest({ sessionId, message, isHeartbeat }) {
        if (isHeartbeat) return { ingested: false };
        return { ingested: store(sessionId, message) };
      },

      async ingestBatch({ sessionId, messages, isHeartbeat }) {
        if (isHeartbeat) return { ingestedCount: 0 };
        return { ingestedCount: messages.filter((m) => store(sessionId, m)).length };
      },

      async afterTurn({ sessionId, messages, prePromptMessageCount }) {
        for (const message of messages.slice(Math.min(prePromptMessageCount, count(sessionId)))) store(sessionId, message);
      },

      async assemble({ sessionId, messages, availableTools }) {
        const stored = messagesOf(sessionId);
        const source = stored.length ? stored : messages;
        const olderCount = Math.max(0, source.length - config.keepRecent);
        const recent = source.slice(olderCount);
        const out = [];
        if (olderCount > 0 && stored.length) {
          const { summary } = await summarise(sessionId, olderCount);
          out.push({ role: "compactionSummary", summary, timestamp: Date.now() });
        }
        out.push(...recent);
        const chars = out.reduce((n, m) => n + textOf(m).length, 0);
        // OpenClaw passes the run's tool names as a Set.
        const canRecall = availableTools instanceof Set && availableTools.has("session_recall");
        return {
          messages: out,
          estimatedTokens: Math.ceil(chars / 4),
          systemPromptAddition: olderCount
            ? `${olderCount} older messages are summarised.${canRecall ? " Call session_recall to look up their exact wording." : ""}`
            : undefined,
        };
      },

      async compact({ sessionId }) {
        const total = count(sessionId);
        const upTo = total - config.keepRecent;
        if (upTo <= 0) return { ok: true, compacted: false, reason: "nothing older than the recent window" };
        const tokensBefore = Math.ceil(messagesOf(sessionId).reduce((n, m) => n + textOf(m).length, 0) / 4);
        const { summary } = await summarise(sessionId, upTo);
        return { ok: true, compacted: true, result: { summary, tokensBefore, tokensAfter: Math.ceil(summary.length / 4) } };
      },

      async prepareSubagentSpawn({ parentSessionKey, childSessionKey }) {
        open().prepare("INSERT OR REPLACE INTO children (child_session_key, parent_session_key) VALUES (?, ?)").run(childSessionKey, parentSessionKey);
        return {
          rollback: () => {
            open().prepare("DELETE FROM children WHERE child_session_key = ?").run(childSessionKey);
          },
        };
      },

      async onSubagentEnded({ childSessionKey }) {
        open().prepare("DELETE FROM children WHERE child_session_key = ?").run(childSessionKey);
      },

      async dispose() {
        db?.close();
        db = null;
      },
    }));

    // A tool factory: OpenClaw builds the tool per run with the run's session in `ctx`.
    api.registerTool(
      (ctx) => ({
        name: "session_recall",
        label: "Session recall",
        description: "Search this session's earlier messages (including summarised ones) for a word or phrase.",
        parameters: {
          type: "object",
          properties: { query: { type: "string", description: "Text to look for" } },
          required: ["query"],
          additionalProperties: false,
        },
        async execute(_toolCallId, params) {
          const rows = open()
            .prepare("SELECT role, text FROM messages WHERE session_id = ? AND text LIKE ? ORDER BY seq")
            .all(ctx.sessionId ?? "", `%${params.query}%`);
          const text = rows.length ? rows.map((r) => `${r.role}: ${r.text}`).join("\n") : `no message mentions "${params.query}"`;
          return { content: [{ type: "text", text }], details: { matches: rows.length } };
        },
      }),
      { names: ["session_recall"] },
    );

    api.registerCommand({
      name: "summary",
      description: "Show the summary of this session's older messages.",
      acceptsArgs: false,
      handler: (ctx) => {
        const row = ctx.sessionId ? summaryOf(ctx.sessionId) : null;
        const children = open().prepare("SELECT COUNT(*) AS n FROM children").get().n;
        return { text: row ? `${row.summary} (covers ${row.covered} messages; ${children} subagents)` : `no summary yet (${children} subagents)` };
      },
    });

    api.on("before_prompt_build", (_event, ctx) => {
      const row = ctx.sessionId ? summaryOf(ctx.sessionId) : null;
      return {
        prependSystemContext: "The session-summary plugin keeps older messages as a summary.",
        ...(row ? { prependContext: `Summary of the earlier conversation: ${row.summary}` } : {}),
      };
    });

    api.on("session_end", (event) => {
      open().prepare("DELETE FROM messages WHERE session_id = ?").run(event.sessionId);
      open().prepare("DELETE FROM summaries WHERE session_id = ?").run(event.sessionId);
    });

    api.on("gateway_stop", () => {
      db?.close();
      db = null;
    });
  },
});
