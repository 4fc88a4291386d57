// The session-summary example plugin (examples/openclaw-summary-plugin), written only against
// the published OpenClaw plugin API, runs unchanged through the host: object export with a
// configSchema, node:sqlite storage, sessionFile at bootstrap, runtime.llm.complete with a
// system prompt, a tool the model calls, before_prompt_build, rollback handles. Needs
// Node >= 22.5 (the pinned one from package.json when installed).

import assert from "node:assert/strict";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { after, test } from "node:test";

import { EXAMPLES, initializeParams, machineNode, pinnedNode, scratch, startHost, supportsSqlite, stopAll } from "./harness.mjs";

after(stopAll);

const PLUGIN = path.join(EXAMPLES, "openclaw-summary-plugin");
const node = pinnedNode();
const skip = supportsSqlite(node) ? false : `${node} is older than Node 22.5 (no node:sqlite); install the pinned Node with npm ci here`;

const message = (i) => ({ id: `m${i}`, role: i % 2 ? "user" : "assistant", content: `message ${i} about topic-${i}` });

// A session file as OpenClaw writes it (session version 4): header, then chained message entries.
function writeSessionFile(file, sessionId, messages) {
  const lines = [{ type: "session", version: 4, id: sessionId, timestamp: "2026-01-01T00:00:00.000Z", cwd: "/work" }];
  let parentId = null;
  for (const m of messages) {
    const { id, ...body } = m;
    lines.push({ type: "message", id, parentId, timestamp: "2026-01-01T00:00:01.000Z", message: body });
    parentId = id;
  }
  writeFileSync(file, `${lines.map((l) => JSON.stringify(l)).join("\n")}\n`);
}

// Starts the plugin with HOME and TMPDIR pointing at directories the plugin must not touch.
function start(name, { config = { keepRecent: 2 }, onHostRequest } = {}) {
  const dir = scratch(name);
  const home = path.join(dir, "user-home");
  const tmp = path.join(dir, "system-tmp");
  mkdirSync(home);
  mkdirSync(tmp);
  const stateDir = path.join(dir, "ctxbridge-state", "engines", "session-summary");
  const host = startHost({
    plugin: PLUGIN,
    node,
    cwd: dir,
    env: { HOME: home, TMPDIR: tmp, OPENCLAW_STATE_DIR: stateDir },
    onHostRequest: onHostRequest ?? ((method, params) => ({ text: `summary of ${params.messages[0].content.split("\n").length - 3} lines`, model: "mock-model" })),
  });
  return { host, dir, home, tmp, stateDir, init: () => host.call("initialize", initializeParams("session-summary", config)) };
}

/** initialize lists the engine, its methods (rollbackSubagentSpawn served by the host), the registered tool with its JSON schema, the hooks and the command. */
test("initialize describes info, methods, tools, hooks and commands", { skip }, async () => {
  const { host, init } = start("init");
  const result = await init();
  assert.deepEqual(result.info, { id: "session-summary", name: "Session Summary", version: "1.0.0", ownsCompaction: true });
  for (const m of ["bootstrap", "ingest", "ingestBatch", "afterTurn", "assemble", "compact", "prepareSubagentSpawn", "rollbackSubagentSpawn", "onSubagentEnded", "dispose"]) {
    assert.ok(result.methods.includes(m), `methods lists ${m}`);
  }
  assert.deepEqual(result.tools, [
    {
      name: "session_recall",
      description: "Search this session's earlier messages (including summarised ones) for a word or phrase.",
      parameters: {
        type: "object",
        properties: { query: { type: "string", description: "Text to look for" } },
        required: ["query"],
        additionalProperties: false,
      },
    },
  ]);
  assert.deepEqual(result.hooks, ["before_prompt_build", "session_end", "gateway_stop"]);
  assert.deepEqual(result.commands, [{ name: "summary", description: "Show the summary of this session's older messages.", acceptsArgs: false }]);
  assert.equal(await host.close(), 0);
});

/** bootstrap imports the OpenClaw-format sessionFile; the database lands under the engine's state dir, nothing under HOME or TMPDIR. */
test("bootstrap reads sessionFile; state stays in the engine's state dir", { skip }, async () => {
  const { host, dir, home, tmp, stateDir, init } = start("bootstrap");
  await init();
  const sessionFile = path.join(dir, "s1.jsonl");
  writeSessionFile(sessionFile, "s1", [1, 2, 3].map(message));
  const boot = await host.call("bootstrap", { sessionId: "s1", sessionKey: "agent:main:s1", sessionFile });
  assert.deepEqual(boot, { bootstrapped: true, importedMessages: 3 });
  const again = await host.call("bootstrap", { sessionId: "s1", sessionFile });
  assert.equal(again.bootstrapped, false);
  await host.call("dispose", {});
  assert.equal(await host.close(), 0);
  assert.ok(existsSync(path.join(stateDir, "home", ".session-summary", "summary.sqlite")), "database under <stateDir>/home");
  assert.deepEqual(readdirSync(home), [], "nothing written to the user's home");
  assert.deepEqual(readdirSync(tmp), [], "nothing written to the system temp dir");
});

/** assemble summarises older messages through runtime/llmComplete with the plugin's systemPrompt, purpose and maxTokens; availableTools is a Set inside the host. */
test("assemble asks the host's model with a system prompt; availableTools is a Set", { skip }, async () => {
  const { host, init } = start("assemble");
  await init();
  const messages = [1, 2, 3, 4, 5].map(message);
  await host.call("ingestBatch", { sessionId: "s1", sessionKey: "k1", messages });
  const result = await host.call("assemble", { sessionId: "s1", sessionKey: "k1", messages, availableTools: ["session_recall", "shell"], tokenBudget: 1000 });
  assert.deepEqual(result.messages.slice(1), [message(4), message(5)]);
  assert.equal(result.messages[0].role, "compactionSummary");
  assert.equal(result.messages[0].summary, "summary of 3 lines");
  assert.equal(result.systemPromptAddition, "3 older messages are summarised. Call session_recall to look up their exact wording.");
  assert.equal(host.hostRequests.length, 1);
  const { method, params } = host.hostRequests[0];
  assert.equal(method, "runtime/llmComplete");
  assert.equal(params.sessionId, "s1");
  assert.equal(params.sessionKey, "k1");
  assert.equal(params.systemPrompt, "You summarise conversations. Keep names, numbers, decisions and open questions. Answer with the summary only.");
  assert.equal(params.purpose, "session-summary: summarise older messages");
  assert.equal(params.maxTokens, 200);
  assert.equal(params.messages.length, 1);
  assert.match(params.messages[0].content, /user: message 1 about topic-1\nassistant: message 2 about topic-2\nuser: message 3 about topic-3/);
  await host.close();
});

/** The model's call of the engine's tool runs the plugin's execute for that session (tools/call). */
test("tools/call runs the registered tool for the session", { skip }, async () => {
  const { host, init } = start("tools");
  await init();
  await host.call("ingestBatch", { sessionId: "s1", messages: [1, 2, 3].map(message) });
  await host.call("ingestBatch", { sessionId: "s2", messages: [{ id: "x", role: "user", content: "topic-2 elsewhere" }] });
  const found = await host.call("tools/call", { sessionId: "s1", name: "session_recall", arguments: { query: "topic-2" } });
  assert.deepEqual(found, { content: [{ type: "text", text: "assistant: message 2 about topic-2" }] });
  const none = await host.call("tools/call", { sessionId: "s1", name: "session_recall", arguments: { query: "zebra" } });
  assert.deepEqual(none, { content: [{ type: "text", text: 'no message mentions "zebra"' }] });
  await host.close();
});

/** hooks/before_prompt_build returns the plugin's prependSystemContext and, once a summary exists, prependContext; hooks/session_end forgets the session; hooks/gateway_stop reaches the plugin. */
test("before_prompt_build and session_end hooks", { skip }, async () => {
  const { host, init } = start("hooks");
  await init();
  const before = await host.call("hooks/before_prompt_build", { event: { prompt: "hi", messages: [] }, ctx: { sessionId: "s1" } });
  assert.deepEqual(before, { prependSystemContext: "The session-summary plugin keeps older messages as a summary." });
  const messages = [1, 2, 3].map(message);
  await host.call("ingestBatch", { sessionId: "s1", messages });
  await host.call("assemble", { sessionId: "s1", messages });
  const after = await host.call("hooks/before_prompt_build", { event: { prompt: "hi", messages: [] }, ctx: { sessionId: "s1", sessionKey: "k1" } });
  assert.deepEqual(after, {
    prependSystemContext: "The session-summary plugin keeps older messages as a summary.",
    prependContext: "Summary of the earlier conversation: summary of 1 lines",
  });
  assert.equal(await host.call("hooks/session_end", { event: { sessionId: "s1", messageCount: 3, reason: "deleted" }, ctx: { sessionId: "s1" } }), null);
  const gone = await host.call("tools/call", { sessionId: "s1", name: "session_recall", arguments: { query: "topic" } });
  assert.equal(gone.content[0].text, 'no message mentions "topic"');
  // gateway_stop closes the plugin's database; the plugin reopens it on its next use.
  assert.equal(await host.call("hooks/gateway_stop", { event: { reason: "shutdown" }, ctx: {} }), null);
  await host.call("ingestBatch", { sessionId: "s1", messages: [message(7)] });
  const back = await host.call("tools/call", { sessionId: "s1", name: "session_recall", arguments: { query: "topic-7" } });
  assert.equal(back.content[0].text, "user: message 7 about topic-7");
  await host.close();
});

/** prepareSubagentSpawn's rollback function becomes a rollbackId; rollbackSubagentSpawn with it runs the plugin's rollback; an unknown id is an error. */
test("rollback handles become ids the host keeps and calls", { skip }, async () => {
  const { host, init } = start("rollback");
  await init();
  const prepared = await host.call("prepareSubagentSpawn", { parentSessionKey: "p", childSessionKey: "c", contextMode: "isolated" });
  assert.match(prepared.rollbackId, /^rollback-/);
  assert.equal((await host.call("commands/call", { name: "summary" })).text, "no summary yet (1 subagents)");
  assert.equal(await host.call("rollbackSubagentSpawn", { rollbackId: prepared.rollbackId }), null);
  assert.equal((await host.call("commands/call", { name: "/summary" })).text, "no summary yet (0 subagents)");
  const again = await host.request("rollbackSubagentSpawn", { rollbackId: prepared.rollbackId });
  assert.match(again.error.message, /unknown rollbackId/);
  await host.close();
});

/** compact folds all but the recent window into the summary through the host's model. */
test("compact summarises through the host's model", { skip }, async () => {
  const { host, init } = start("compact");
  await init();
  await host.call("ingestBatch", { sessionId: "s1", messages: [1, 2, 3, 4].map(message) });
  const result = await host.call("compact", { sessionId: "s1", sessionKey: "k1", force: true });
  assert.equal(result.ok, true);
  assert.equal(result.compacted, true);
  assert.equal(result.result.summary, "summary of 2 lines");
  assert.equal(host.hostRequests[0].params.systemPrompt.startsWith("You summarise conversations."), true);
  await host.close();
});

/** A config that fails the plugin's safeParse is refused at initialize as a config error naming each bad key. */
test("configSchema.safeParse errors name the key", { skip }, async () => {
  const { host } = start("config");
  const response = await host.request("initialize", initializeParams("session-summary", { keepRecent: 0, colour: "red" }));
  assert.equal(response.error.code, -32010);
  assert.match(response.error.message, /colour: unknown key/);
  assert.match(response.error.message, /keepRecent: must be an integer >= 1/);
  assert.deepEqual(response.error.data.errors.map((e) => e.key).sort(), ["colour", "keepRecent"]);
  await host.close();
});

/** Without a sessionFile from ctxbridge the host keeps one in OpenClaw's format under the state dir: header first, afterTurn's new messages appended as chained entries. */
test("fallback session file in OpenClaw's JSONL format", { skip }, async () => {
  const { host, stateDir, init } = start("fallback");
  await init();
  const boot = await host.call("bootstrap", { sessionId: "s9" });
  assert.deepEqual(boot, { bootstrapped: true, importedMessages: 0 });
  await host.call("afterTurn", { sessionId: "s9", messages: [message(1), message(2)], prePromptMessageCount: 0 });
  await host.close();
  const lines = readFileSync(path.join(stateDir, "sessions", "s9.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l));
  assert.equal(lines.length, 3);
  assert.equal(lines[0].type, "session");
  assert.equal(lines[0].version, 4);
  assert.equal(lines[0].id, "s9");
  assert.equal(lines[1].type, "message");
  assert.equal(lines[1].parentId, null);
  assert.deepEqual(lines[1].message, message(1));
  assert.equal(lines[2].parentId, lines[1].id);
  assert.deepEqual(lines[2].message, message(2));
});

/** On a Node older than the plugin's package.json engines.node, initialize fails saying which Node the plugin needs. */
test("an older Node is refused with the plugin's engines.node", { skip: supportsSqlite(machineNode()) ? "the machine's Node is new enough" : false }, async () => {
  const host = startHost({ plugin: PLUGIN, node: machineNode(), cwd: scratch("old-node") });
  const response = await host.request("initialize", initializeParams("session-summary"));
  assert.match(response.error.message, /plugin openclaw-session-summary needs Node >=22\.5 \(package\.json engines\.node\); this host runs on Node \d+\.\d+\.\d+/);
  await host.close();
});
