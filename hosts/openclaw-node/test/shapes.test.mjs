// Plugin shapes, config schemas and the api surface, on whatever Node runs the tests (no
// node:sqlite needed).

import assert from "node:assert/strict";
import path from "node:path";
import { after, test } from "node:test";

import { initializeParams, nodeVersion, pinnedNode, scratch, startHost, stopAll } from "./harness.mjs";

after(stopAll);

const fixture = (name) => path.join(import.meta.dirname ?? path.dirname(new URL(import.meta.url).pathname), "fixtures", name);

/** A CommonJS bare register(api) function loads; unserved members exist at load time; one that needs an answer fails when called, naming itself, while a registration this host does not offer is accepted and reported. */
test("CommonJS register function: unserved members are present at load; calls fail, registrations are accepted", async () => {
  const dir = scratch("cjs");
  const host = startHost({ plugin: fixture("cjs-register.cjs"), node: process.execPath, cwd: dir });
  const init = await host.call("initialize", initializeParams("cjs-engine"));
  assert.equal(init.info.id, "cjs-engine");
  assert.deepEqual(init.tools.map((t) => t.name), ["spawn_helper", "http_route"]);

  const assembled = await host.call("assemble", { sessionId: "s", messages: [] });
  assert.equal(assembled.systemPromptAddition, "load-time member types: function,function,function");

  const spawned = await host.call("tools/call", { sessionId: "s", name: "spawn_helper", arguments: {} });
  assert.equal(spawned.isError, true);
  assert.equal(spawned.content[0].text, "not supported by this host: runtime.subagent.run");

  const route = await host.call("tools/call", { sessionId: "s", name: "http_route", arguments: "{}" });
  assert.equal(route.isError, undefined);
  assert.equal(route.content[0].text, "registered");

  const missing = await host.request("tools/call", { sessionId: "s", name: "no_such_tool", arguments: {} });
  assert.match(missing.error.message, /no tool named "no_such_tool"/);
  assert.equal(await host.close(), 0);
});

/** Registrations of seams this host does not offer never fail a load: a session action through an optional-chaining probe, unguarded provider and agent-event registrations, a hook the host never fires (per initialize's host.hooks) are accepted, reported in initialize.unoffered (each seam once) and logged once; a member that needs an answer now still throws. */
test("registrations this host does not offer are accepted and reported; calls still throw", async () => {
  const host = startHost({ plugin: fixture("registrations.mjs"), node: process.execPath, cwd: scratch("registrations") });
  const params = initializeParams("registrations");
  params.host.hooks = ["before_prompt_build", "session_start", "session_end", "before_reset", "gateway_start", "gateway_stop"];
  const init = await host.call("initialize", params);
  assert.equal(init.info.id, "registrations");
  assert.deepEqual(init.unoffered, [
    "api.session.controls.registerSessionAction",
    "api.registerProvider",
    "api.agent.events.registerAgentEventSubscription",
    "api.on(agent_end)",
  ]);
  assert.deepEqual(init.hooks, ["agent_end", "session_end"]);
  const assembled = await host.call("assemble", { sessionId: "s", messages: [] });
  assert.equal(assembled.systemPromptAddition, "not supported by this host: api.setRunContext");
  assert.equal(host.stderr.match(/registered but not offered by this host: api\.registerProvider/g)?.length, 1, host.stderr);
  assert.equal(await host.close(), 0);
});

/** llm.complete forwards systemPrompt (system-role messages folded in), model, purpose and maxTokens with the session; subagent.complete goes the same way. */
test("runtime/llmComplete carries systemPrompt, model, purpose and maxTokens", async () => {
  const dir = scratch("llm");
  const host = startHost({
    plugin: fixture("llm-object.mjs"),
    node: process.execPath,
    cwd: dir,
    onHostRequest: (method, params) => {
      if (method === "runtime/llmComplete") return { text: `answer(${params.purpose})`, model: params.model ?? "default-model" };
      if (method === "runtime/delegateCompaction") return { ok: true, compacted: true, reason: `delegated ${params.sessionId}` };
      throw new Error(`unexpected ${method}`);
    },
  });
  const init = await host.call("initialize", initializeParams("llm-object", { mode: "slow" }));
  assert.equal(init.info.id, "llm-object");

  const compacted = await host.call("compact", { sessionId: "s1", sessionKey: "k1", runtimeContext: { tokenBudget: 1000 } });
  assert.equal(compacted.result.summary, "answer(compaction summary) via gpt-test");
  const [llm] = host.hostRequests;
  assert.equal(llm.method, "runtime/llmComplete");
  assert.deepEqual(llm.params, {
    sessionId: "s1",
    sessionKey: "k1",
    model: "gpt-test",
    purpose: "compaction summary",
    maxTokens: 7,
    messages: [{ role: "user", content: "summarise" }],
    systemPrompt: "first system part\n\nsecond system part",
  });

  const assembled = await host.call("assemble", { sessionId: "s2", messages: [] });
  assert.equal(assembled.systemPromptAddition, "mode=slow subagent=answer(subagent.complete)");
  const sub = host.hostRequests[1];
  assert.deepEqual(sub.params, {
    sessionId: "s2",
    model: "small",
    agentId: "main",
    purpose: "subagent.complete",
    messages: [{ role: "user", content: "child question" }],
    systemPrompt: "be brief",
  });

  const delegated = await host.call("compact", { sessionId: "s3", sessionKey: "k3", force: true, runtimeContext: {} });
  assert.equal(delegated.reason, "delegated s3");
  assert.equal(host.hostRequests[2].method, "runtime/delegateCompaction");
  assert.equal(await host.close(), 0);
});

/** A `validate` config schema's error is a config error naming the key. */
test("configSchema.validate errors are config errors naming the key", async () => {
  const host = startHost({ plugin: fixture("llm-object.mjs"), node: process.execPath, cwd: scratch("validate") });
  const response = await host.request("initialize", initializeParams("llm-object", { mode: "turbo" }));
  assert.equal(response.error.code, -32010);
  assert.match(response.error.message, /invalid config for plugin "llm-object" \(plugins\.entries\.llm-object\.config\): mode: must be fast or slow/);
  assert.deepEqual(response.error.data, { kind: "config", errors: [{ key: "mode", message: "must be fast or slow" }] });
  await host.close();
});

/** An `openclaw/…` import the host does not implement (and that is not installed) fails initialize, naming the specifier. */
test("an unimplemented openclaw SDK subpath is named in the load error", async () => {
  const host = startHost({ plugin: fixture("unknown-sdk.mjs"), node: process.execPath, cwd: scratch("sdk") });
  const response = await host.request("initialize", initializeParams("unknown-sdk"));
  assert.match(response.error.message, /not supported by this host: openclaw\/plugin-sdk\/channel-setup/);
  await host.close();
});

/** Requests before initialize are refused with the not-initialized code. */
test("a lifecycle request before initialize is refused", async () => {
  const host = startHost({ plugin: fixture("cjs-register.cjs"), node: process.execPath, cwd: scratch("early") });
  const response = await host.request("assemble", { sessionId: "s", messages: [] });
  assert.equal(response.error.code, -32002);
  await host.close();
});

/** A package-dir plugin with only a manifest JSON Schema: defaults are applied, and each bad key is named. */
test("manifest JSON Schema: defaults applied, errors name the key", async () => {
  const plugin = fixture("manifest-plugin");
  const ok = startHost({ plugin, node: process.execPath, cwd: scratch("manifest") });
  await ok.call("initialize", initializeParams("manifest-plugin", { name: "x" }));
  const assembled = await ok.call("assemble", { sessionId: "s", messages: [] });
  assert.deepEqual(JSON.parse(assembled.systemPromptAddition), {
    pluginConfig: { name: "x", limit: 5 },
    slot: "manifest-plugin",
    stateDir: true,
    registrationMode: "full",
    version: "0.1.0",
  });
  await ok.close();

  const bad = startHost({ plugin, node: process.execPath, cwd: scratch("manifest-bad") });
  const response = await bad.request("initialize", initializeParams("manifest-plugin", { limit: 0, mode: "c", extra: true }));
  assert.equal(response.error.code, -32010);
  assert.deepEqual(
    response.error.data.errors.map((e) => `${e.key}: ${e.message}`).sort(),
    ["extra: is not a known key", "limit: must be >= 1", 'mode: must be one of "a", "b"', "name: is required"],
  );
  await bad.close();
});

/** Every member of OpenClawPluginApi the SDK declares, the runtime namespaces and the runtime members the issue names exist at load time. */
test("the api surface of the published SDK is present at load", async () => {
  const host = startHost({ plugin: fixture("surface-probe.mjs"), node: process.execPath, cwd: scratch("surface") });
  await host.call("initialize", initializeParams("surface-probe"));
  const assembled = await host.call("assemble", { sessionId: "s", messages: [] });
  assert.deepEqual(JSON.parse(assembled.systemPromptAddition), []);
  await host.close();
});

/** A TypeScript entry importing its sibling as "./helper.js" loads (the sibling resolves to helper.ts), and `registerCli` is accepted without running the registrar. */
test("TypeScript plugin: .js sibling imports resolve to .ts; registerCli is kept, not run", async (t) => {
  const node = pinnedNode();
  const [major, minor] = nodeVersion(node);
  if (major < 22 || (major === 22 && minor < 18)) {
    t.skip(`Node ${major}.${minor} does not strip TypeScript types by default (run npm ci here for the pinned Node)`);
    return;
  }
  const dir = scratch("ts");
  const host = startHost({ plugin: fixture("ts-plugin/index.ts"), node, cwd: dir });
  const init = await host.call("initialize", initializeParams("ts-plugin"));
  assert.equal(init.info.id, "ts-plugin");
  const assembled = await host.call("assemble", { sessionId: "s", messages: [] });
  assert.equal(assembled.systemPromptAddition, "helper.ts loaded; 1 CLI registrars accepted");
  assert.equal(await host.close(), 0);
});
