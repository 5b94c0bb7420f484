"""The text routes' bad-input corpus (tests/corpus/bad_text.py) against the ingress in process:
every case is a 4xx with an OpenAI error body, and only the slot-checked cases reach a slot
(there the fake answers 418, so they cannot pass for a real answer; tests/e2e runs them)."""

from __future__ import annotations

import pytest

from tests.corpus.bad_text import CASES, SLOT_CHECKED, assert_openai_4xx, request_of


def test_corpus_is_big_enough():
    # ~100 once the schema's own kinds of bad value moved to tests/ingress/test_schema_fuzz.py
    assert len(CASES) >= 100 and SLOT_CHECKED <= {case.id for case in CASES}


@pytest.mark.parametrize("path, spec", CASES)
async def test_bad_request_is_refused_by_the_ingress(http, slots, path, spec, request):
    slots["llm"].answers.clear()  # any call reaching the slot answers 418
    case_id = request.node.callspec.id
    r = await http.request(url=path, **request_of(spec))
    if case_id in SLOT_CHECKED:
        assert r.status_code == 418, "a slot-checked case must pass the ingress (else move it out of SLOT_CHECKED)"
    else:
        assert_openai_4xx(r)
        assert not slots["llm"].calls, "refused by the ingress, so no slot may see it"
