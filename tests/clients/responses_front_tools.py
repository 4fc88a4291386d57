"""Drives function tools through ctxbridge's Responses front with the official `openai`
Python package: a round trip on a previous_response_id chain (non-streamed), one in a
conversation (streamed), and the chain going on past an epoch change.

Usage: python3 responses_front_tools.py BASE_URL TOKEN
Prints one JSON object with what the client saw; the Rust test asserts on it.
"""
import json
import sys

from openai import OpenAI

base_url, token = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base_url, api_key=token, max_retries=0)
seen = {}

tools = [{
    "type": "function",
    "name": "get_weather",
    "description": "The weather of a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}]


def run_calls(response):
    """The client's side of a tool call: the outputs of the response's function calls."""
    outputs = []
    for item in response.output:
        if item.type == "function_call":
            city = json.loads(item.arguments)["city"]
            outputs.append({"type": "function_call_output", "call_id": item.call_id,
                            "output": f"{city}: 18C and sunny"})
    return outputs


# A chain: the model calls the function, the client runs it, the model answers.
first = client.responses.create(model="mock-model", input="What is the weather in Paris?",
                                tools=tools, instructions="Answer in one line.")
outputs = run_calls(first)
second = client.responses.create(model="mock-model", previous_response_id=first.id,
                                 input=outputs, tools=tools)
seen["chain"] = {
    "first": first.to_dict(),
    "outputs": outputs,
    "second": {"id": second.id, "text": second.output_text, "status": second.status,
               "previous": second.previous_response_id},
    "input_items": [i.to_dict() for i in client.responses.input_items.list(second.id).data],
}

# The chain goes on as ordinary turns, past an epoch change of the engine.
previous = second.id
later = []
for prompt in ["and tomorrow?", "and the day after?"]:
    r = client.responses.create(model="mock-model", input=prompt, previous_response_id=previous)
    later.append({"id": r.id, "text": r.output_text})
    previous = r.id
seen["later"] = later

# A conversation, streamed.
conversation = client.conversations.create()
events = []
with client.responses.stream(model="mock-model", input="What is the weather in Oslo?",
                             tools=tools, conversation=conversation.id) as stream:
    for event in stream:
        events.append(event.type)
    called = stream.get_final_response()
deltas = []
with client.responses.stream(model="mock-model", input=run_calls(called), tools=tools,
                             conversation=conversation.id) as stream:
    for event in stream:
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
    answered = stream.get_final_response()
seen["conversation"] = {
    "called_events": events,
    "called": called.to_dict(),
    "answer": answered.output_text,
    "deltas": "".join(deltas),
    "items": [i.to_dict() for i in client.conversations.items.list(conversation.id).data],
}

print(json.dumps(seen))
