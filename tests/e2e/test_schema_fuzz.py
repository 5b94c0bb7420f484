"""Schemathesis against the live graph's own /openapi.json, over HTTP: a few generated requests
per operation, each checked by tests/schema_fuzz.py's `checks_for` (no 5xx; a request the
schema calls invalid is refused with a 4xx, never served), and afterwards the graph is ready
and serves a chat.

In process, tests/ingress/test_schema_fuzz.py runs the thorough pass (the coverage phase's
field-by-field boundary and wrong-type cases, more examples) over fake slots; this run is the
same checks through the real proxy, ingress and slots: what only a slot can judge (token
counts, audio that does not decode, a tokenizer fed any Unicode) and what the Serve proxy does
to a request. Positive requests for the routes that generate run end to end in their own files
(test_llm_api.py, test_tts_api.py, test_images_api.py, ...), so here those routes get negative
requests only or small token budgets.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from tests.schema_fuzz import checks_for

# Left out, each for its reason: they change the session graph for the files after this one, or
# take minutes.
EXCLUDED = {
    "POST /v1/models/load": "switches a slot's model on every replica (test_model_management.py does it and undoes it)",
    "POST /v1/models/unload": "takes a slot's model off every replica",
    "POST /v1/models/download": "fetches from the Hugging Face hub: no network here, minutes with one",
    "POST /v1/models/remove": "deletes model files from the graph's cache",
    "POST /v1/models/quantize": "writes a quantized copy of an image model: minutes",
    "POST /v1/voices": "registers voices in the cluster's voice store, which the session graph keeps",
    "DELETE /v1/voices/{name}": "deletes from the cluster's voice store, which other files use",
    "POST /v1/voices/train": "a voice-training job: minutes",
    "POST /v1/audio/stream/sessions": "opens streaming sessions that hold ASR replica state until they time out",
}
# Routes whose valid requests do real work (an image, speech, an agent turn): invalid requests
# only, which must be refused before any work starts.
NEGATIVE_ONLY = {
    "POST /v1/images/generations",
    "POST /v1/audio/speech",
    "POST /v1/audio/speech/clone",
    "POST /dev/captioned_speech",
    "POST /v1/audio/tts/qwen3",
    "POST /v1/audio/tts/clone",
    "POST /v1/audio/tts/sovits",
    "POST /v1/agent/stream",
}
# Routes that generate text or read audio: two requests, valid or invalid, a valid one with its
# token budget cut (`_bounded`); random bytes as audio are refused by the ASR slot's decoder in
# milliseconds.
EXPENSIVE = {
    "POST /v1/chat/completions",
    "POST /v1/completions",
    "POST /v1/responses",
    "POST /v1/messages",
    "POST /v1/vlm/completions",
    "POST /v1/audio/transcriptions",
    "POST /v1/audio/translations",
    "POST /v1/audio/diarization",
    "POST /v1/audio/asr/qwen3",
    "POST /v1/audio/asr/paraformer",
}
EXAMPLES, EXPENSIVE_EXAMPLES = 5, 2
TOKEN_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
MAX_TOKENS = 8


def _bounded(case) -> None:
    """A valid request's token budget cut to MAX_TOKENS (still valid: every budget is >= 1)."""
    if isinstance(case.body, dict):
        for field in TOKEN_FIELDS:
            value = case.body.get(field)
            if isinstance(value, int) and not isinstance(value, bool) and value > MAX_TOKENS:
                case.body[field] = MAX_TOKENS


def _strategy(operation, label: str):
    negative = operation.as_strategy(generation_mode=GenerationMode.NEGATIVE)
    if label in NEGATIVE_ONLY:
        return negative
    return st.one_of(operation.as_strategy(generation_mode=GenerationMode.POSITIVE), negative)


def _fuzz(operation, label: str, base_url: str) -> None:
    @given(case=_strategy(operation, label))
    @settings(
        max_examples=EXPENSIVE_EXAMPLES if label in EXPENSIVE or label in NEGATIVE_ONLY else EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        # No shrinking: each try is an HTTP request to the graph; the first failing one is reported.
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case):
        if case.meta is not None and case.meta.generation.mode.is_positive:
            _bounded(case)
        case.call_and_validate(base_url=base_url, checks=checks_for(case), timeout=120)

    run()


@pytest.fixture(scope="module")
def graph_schema(server):
    return schemathesis.openapi.from_url(f"{server}/openapi.json")


def test_every_operation_refuses_invalid_requests_without_a_5xx(server, graph_schema):
    operations = [result.ok() for result in graph_schema.get_all_operations()]
    labels = {f"{op.method.upper()} {op.path}" for op in operations}
    assert set(EXCLUDED) <= labels, "an excluded route is gone: drop it from EXCLUDED"
    assert (NEGATIVE_ONLY | EXPENSIVE) <= labels, "a budgeted route is gone: drop it here"
    failures = []
    for operation in operations:
        label = f"{operation.method.upper()} {operation.path}"
        if label in EXCLUDED:
            continue
        try:
            _fuzz(operation, label, server)
        except Exception as exc:  # every operation runs; all failures are reported together
            failures.append(f"{label}: {exc}")
    assert not failures, "\n\n".join(failures)


def test_graph_is_ready_and_chats_after_the_fuzzing(http, client):
    r = http.get("/readyz")
    assert r.status_code == 200, r.text
    chat = client.chat.completions.create(
        model="ominix-tiny-qwen3", messages=[{"role": "user", "content": "hi"}], max_tokens=2, temperature=0
    )
    assert chat.choices[0].finish_reason == "length" and chat.usage.completion_tokens == 2
