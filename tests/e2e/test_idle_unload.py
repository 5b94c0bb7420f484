"""Idle models are unloaded, on the session's graph: a request for the LLM slot's second model
(the tiny Qwen3) with Ollama's keep_alive of 5 s loads it, every replica that holds it unloads
it once it served nothing for 5 s, the slot's default stays loaded (keep_default_loaded), and
the next request loads it again and answers. A bad keep_alive is a 400 naming it.

The model's keep_alive is put back to the slot's idle_unload_s at the end, because the
session's graph is shared and the last request's keep_alive stays the model's. Under 45 s: a
load of the tiny model, 5 s idle (long enough for status to be seen with the model still in),
at most a second more for the replica's check (MAX_CHECK_INTERVAL_S in
deployments/control/idle.py), a load again."""

from __future__ import annotations

import time

import pytest
import yaml

from deployments.protocol.keep_alive import FOREVER
from tests.assertions import assert_openai_error, wait_for
from tests.e2e.conftest import ROOT

TINY = "ominix-tiny-qwen3"
KEEP_ALIVE_S = 5.0
UNLOAD_WAIT_S = 30


def slot_idle_unload_s() -> float:
    """The shipped llm.idle_unload_s as a keep_alive (-1 where the slot never unloads)."""
    from graphs.config import GraphArgs

    args = yaml.safe_load((ROOT / "serve_config.yaml").read_text())["applications"][0]["args"]
    return GraphArgs.from_args(args, environ={}).llm.idle_unload_s or FOREVER


def chat(http, **fields):
    body = {"model": TINY, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **fields}
    return http.post("/v1/chat/completions", json=body, timeout=120)


def llm_replicas(http) -> list[dict]:
    r = http.get("/v1/models/status")
    assert r.status_code == 200, r.text
    return r.json()["slots"]["llm"]["replicas"]


def rows_of(replicas: list[dict], model: str) -> list[dict]:
    return [row for replica in replicas for row in replica["models"] if row["id"] == model]


@pytest.mark.parametrize("value", [-5, "-2m", "soon"])
def test_a_bad_keep_alive_is_a_400_naming_it(http, value):
    assert_openai_error(chat(http, keep_alive=value), 400, "keep_alive")


def test_an_idle_model_is_unloaded_everywhere_and_loads_again(http):
    default = http.get("/v1/models/status").json()["slots"]["llm"]["default_model"]
    assert default != TINY, "the session's LLM default must be the shipped one for this test"
    try:
        started = time.time()
        r = chat(http, keep_alive=f"{KEEP_ALIVE_S:g}s")
        assert r.status_code == 200, r.text
        assert r.json()["model"] == TINY

        # Status shows it loaded, going once idle for its keep_alive after its last use...
        def shown_with_its_timeout():
            rows = [
                row
                for row in rows_of(llm_replicas(http), TINY)
                if row["idle_unload_s"] == KEEP_ALIVE_S and row["unload_at"] is not None  # None: still in use
            ]
            return max(rows, key=lambda row: row["last_used_at"]) if rows else None

        row = wait_for(shown_with_its_timeout, KEEP_ALIVE_S, interval=0.2)
        assert row["last_used_at"] >= started and row["unload_at"] == pytest.approx(row["last_used_at"] + KEEP_ALIVE_S)

        # ...and then no replica holds it.
        def unloaded_everywhere():
            replicas = llm_replicas(http)
            return replicas if not any(TINY in rep["loaded_models"] for rep in replicas) else None

        replicas = wait_for(unloaded_everywhere, UNLOAD_WAIT_S, interval=0.25)

        # The default stayed on every replica, and says it never idles out.
        assert all(default in rep["loaded_models"] for rep in replicas)
        assert all(row["idle_unload_s"] is None and row["unload_at"] is None for row in rows_of(replicas, default))

        # The next request loads it again and answers.
        again = chat(http, keep_alive=slot_idle_unload_s())
        assert again.status_code == 200, again.text
        assert again.json()["model"] == TINY and again.json()["choices"][0]["finish_reason"] in ("stop", "length")
        wait_for(lambda: any(TINY in rep["loaded_models"] for rep in llm_replicas(http)), 15)
    finally:
        # The model's keep_alive back to the slot's own, for the tests after this one.
        chat(http, keep_alive=slot_idle_unload_s())
