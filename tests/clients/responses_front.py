"""Drives ctxbridge's Responses front with the official `openai` Python package.

Usage: python3 responses_front.py BASE_URL TOKEN
Prints one JSON object with what the client saw; the Rust test asserts on it.
"""
import json
import sys

import openai
from openai import OpenAI

base_url, token = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base_url, api_key=token, max_retries=0)
seen = {"openai": openai.__version__}

# A previous_response_id chain, non-streamed.
chain = []
previous = None
for prompt in ["chain one", "chain two", "chain three"]:
    r = client.responses.create(model="mock-model", input=prompt, previous_response_id=previous)
    chain.append({"id": r.id, "text": r.output_text, "status": r.status,
                  "previous": r.previous_response_id})
    previous = r.id

# The same chain, streamed.
deltas, events = [], []
with client.responses.stream(model="mock-model", input="chain four streamed",
                             previous_response_id=previous) as stream:
    for event in stream:
        events.append(event.type)
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
    final = stream.get_final_response()
chain.append({"id": final.id, "text": final.output_text, "status": final.status,
              "previous": final.previous_response_id})
seen["chain"] = chain
seen["stream"] = {"deltas": "".join(deltas), "events": events}

# A conversation.
conversation = client.conversations.create(metadata={"topic": "bikes"})
answers = []
for prompt in ["conversation one", "conversation two"]:
    r = client.responses.create(model="mock-model", input=prompt, conversation=conversation.id)
    answers.append({"id": r.id, "text": r.output_text,
                    "conversation": r.conversation.id if r.conversation else None})
items = client.conversations.items.list(conversation.id)
seen["conversation"] = {
    "id": conversation.id,
    "metadata": client.conversations.retrieve(conversation.id).metadata,
    "answers": answers,
    "items": [item.to_dict() for item in items.data],
}

# Reads of a response.
retrieved = client.responses.retrieve(chain[1]["id"])
inputs = client.responses.input_items.list(chain[1]["id"])
seen["retrieved"] = {"id": retrieved.id, "text": retrieved.output_text}
seen["input_items"] = [item.to_dict() for item in inputs.data]
seen["models"] = [m.id for m in client.models.list().data]

# Errors in the API's shape.
errors = {}
try:
    client.responses.retrieve("resp_unknown")
except openai.NotFoundError as e:
    errors["unknown"] = {"status": e.status_code, "body": e.body}
try:
    client.responses.create(model="mock-model", input="x", previous_response_id="resp_unknown")
except openai.NotFoundError as e:
    errors["unknown_previous"] = {"status": e.status_code, "body": e.body}
try:
    OpenAI(base_url=base_url, api_key="wrong", max_retries=0).models.list()
except openai.AuthenticationError as e:
    errors["bad_token"] = {"status": e.status_code, "body": e.body}
seen["errors"] = errors

deleted = client.responses.delete(chain[0]["id"])
seen["deleted"] = deleted is None or getattr(deleted, "deleted", True)
try:
    client.responses.retrieve(chain[0]["id"])
    seen["deleted_readable"] = True
except openai.NotFoundError:
    seen["deleted_readable"] = False

print(json.dumps(seen))
