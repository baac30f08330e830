"""The dashboard's OpenAI-compatible endpoint driven by the official OpenAI Python SDK (PyPI
`openai`): the workbenches as models, a chat completion that runs a job (STEP=answer), and the
same streamed (STEP=stream); prints `RESULT {json}` for tests/tests/python_clients.rs.

Environment: BASE_URL (`http://HOST:PORT/v1`), TOKEN (the dashboard token), WORKBENCH, STEP.
"""

import json
import os

import openai

client = openai.OpenAI(base_url=os.environ["BASE_URL"], api_key=os.environ["TOKEN"], max_retries=0, timeout=120)
workbench = os.environ["WORKBENCH"]
messages = [{"role": "user", "content": "Write notes.md"}]
result = {}

if os.environ["STEP"] == "answer":
    result["models"] = [model.id for model in client.models.list()]
    completion = client.chat.completions.create(model=workbench, messages=messages)
    result["answer"] = completion.choices[0].message.content
    result["finish"] = completion.choices[0].finish_reason
    result["usage"] = completion.usage.total_tokens
    try:
        client.chat.completions.create(model=workbench, messages=messages)
        result["conflict"] = "not refused"
    except openai.APIStatusError as error:
        result["conflict"] = {"status": error.status_code, "code": error.code}
else:
    chunks = list(client.chat.completions.create(model=workbench, messages=messages, stream=True))
    result["chunks"] = len(chunks)
    result["streamed"] = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    result["finish"] = next((c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason), None)

print("RESULT " + json.dumps(result), flush=True)
