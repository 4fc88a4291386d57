// Drives a function tool round trip through ctxbridge's Responses front with the official
// `openai` npm package: the model calls the function (streamed), the client runs it and
// sends the output on the chain, the model answers.
// Usage: node responses_front_tools.mjs BASE_URL TOKEN
// Prints one JSON object with what the client saw; the Rust test asserts on it.
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const tools = [{
  type: "function",
  name: "get_weather",
  description: "The weather of a city.",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  strict: false,
}];

const stream = await client.responses.create({
  model: "mock-model", input: "What is the weather in Rome?", tools, stream: true,
});
const events = [];
let called;
for await (const event of stream) {
  events.push(event.type);
  if (event.type === "response.completed") called = event.response;
}
const outputs = called.output
  .filter((item) => item.type === "function_call")
  .map((item) => ({
    type: "function_call_output",
    call_id: item.call_id,
    output: `${JSON.parse(item.arguments).city}: 21C and clear`,
  }));
const answered = await client.responses.create({
  model: "mock-model", previous_response_id: called.id, input: outputs, tools,
});
console.log(JSON.stringify({
  events,
  calledId: called.id,
  called: called.output,
  outputs,
  answer: { id: answered.id, text: answered.output_text, previous: answered.previous_response_id },
}));
