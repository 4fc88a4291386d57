// Drives ctxbridge's Responses front with the official `openai` npm package.
// Usage: node responses_front.mjs BASE_URL TOKEN
// Prints one JSON object with what the client saw; the Rust test asserts on it.
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const seen = {};

const chain = [];
let previous;
for (const input of ["npm chain one", "npm chain two"]) {
  const r = await client.responses.create({ model: "mock-model", input, previous_response_id: previous });
  chain.push({ id: r.id, text: r.output_text, previous: r.previous_response_id });
  previous = r.id;
}

const stream = await client.responses.create({
  model: "mock-model", input: "npm chain three streamed", previous_response_id: previous, stream: true,
});
let deltas = "";
const events = [];
let completed;
for await (const event of stream) {
  events.push(event.type);
  if (event.type === "response.output_text.delta") deltas += event.delta;
  if (event.type === "response.completed") completed = event.response;
}
chain.push({ id: completed.id, text: completed.output.map((o) => o.content[0].text).join(""), previous: completed.previous_response_id });
seen.chain = chain;
seen.stream = { deltas, events };

const conversation = await client.conversations.create({});
const inConversation = await client.responses.create({ model: "mock-model", input: "npm conversation", conversation: conversation.id });
seen.conversation = { id: conversation.id, answer: inConversation.conversation?.id, text: inConversation.output_text };

try {
  await client.responses.retrieve("resp_unknown");
  seen.unknown = null;
} catch (e) {
  seen.unknown = { status: e.status, param: e.param ?? null, type: e.type ?? null };
}
console.log(JSON.stringify(seen));
