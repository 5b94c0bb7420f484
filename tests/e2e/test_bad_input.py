"""The text corpus's slot-checked cases (tests/corpus/bad_text.py) through the live graph: each
gets a 4xx with an OpenAI error body from the LLM slot, and afterwards the graph answers a
normal request with every replica still the same. The ingress's own refusals are tested in
process (tests/ingress/test_bad_input.py)."""

from __future__ import annotations

import pytest

from tests.corpus.bad_text import CASES, GOOD_CHAT, SLOT_CHECKED, assert_openai_4xx, request_of

SLOT_CASES = [case for case in CASES if case.id in SLOT_CHECKED]


@pytest.mark.parametrize("path, spec", SLOT_CASES)
def test_bad_request_gets_an_openai_4xx_from_the_slot(http, path, spec):
    assert_openai_4xx(http.request(url=path, **request_of(spec)))


def test_graph_is_intact_after_the_corpus(client):
    from ray import serve

    r = client.chat.completions.create(**GOOD_CHAT, temperature=0)
    assert r.choices[0].finish_reason == "length"
    app = serve.status().applications["ominix"]
    assert app.status == "RUNNING"
    for name, deployment in app.deployments.items():
        assert deployment.status == "HEALTHY", name
        assert set(deployment.replica_states) == {"RUNNING"}, (name, deployment.replica_states)
