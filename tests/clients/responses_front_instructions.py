"""Drives ctxbridge's Responses front with the official `openai` Python package: a chain that
starts with a system message at the head of its input, as SDK code often writes it.

Usage: python3 responses_front_instructions.py BASE_URL TOKEN
Prints one JSON object with what the client saw; the Rust test asserts on it.
"""
import json
import sys

from openai import OpenAI

base_url, token = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base_url, api_key=token, max_retries=0)

first = client.responses.create(model="mock-model", input=[
    {"role": "system", "content": "PY-SYSTEM-MARK: answer as a pirate."},
    {"role": "user", "content": "hello"},
])
second = client.responses.create(model="mock-model", input="and now?",
                                 previous_response_id=first.id)
items = client.responses.input_items.list(first.id)
print(json.dumps({
    "answers": [first.output_text, second.output_text],
    "statuses": [first.status, second.status],
    "previous": second.previous_response_id,
    "first_id": first.id,
    "roles": [item.to_dict().get("role") for item in items.data],
}))
