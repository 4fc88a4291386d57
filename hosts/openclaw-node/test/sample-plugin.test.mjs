// The original sample plugin (sample-plugin/index.mjs) keeps working on the machine's own
// Node (no node:sqlite needed).

import assert from "node:assert/strict";
import path from "node:path";
import { after, test } from "node:test";

import { HOST_DIR, initializeParams, machineNode, scratch, startHost, stopAll } from "./harness.mjs";

after(stopAll);

/** recent-window loads on the machine's Node, takes its config from api.pluginConfig, windows assemble and exits when stdin closes. */
test("the recent-window sample runs on the machine's Node", async () => {
  const host = startHost({ plugin: path.join(HOST_DIR, "sample-plugin", "index.mjs"), node: machineNode(), cwd: scratch("sample") });
  const init = await host.call("initialize", initializeParams("recent-window", { windowSize: 2, projection: "thread_bootstrap" }));
  assert.equal(init.info.id, "recent-window");
  assert.deepEqual(init.methods, ["ingest", "assemble", "compact", "ingestBatch", "afterTurn", "dispose"]);
  const messages = [1, 2, 3, 4, 5].map((i) => ({ id: `m${i}`, role: "user", content: `m${i}` }));
  const result = await host.call("assemble", { sessionId: "s", messages, availableTools: ["a"] });
  assert.deepEqual(result.messages, messages.slice(3));
  assert.deepEqual(result.contextProjection, { mode: "thread_bootstrap", epoch: "window-2" });
  assert.equal(await host.call("dispose", {}), null);
  assert.equal(await host.close(), 0);
});
