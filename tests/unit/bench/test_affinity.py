"""The affinity scenario's figures (bench/affinity.py); the scenario itself runs on a Ray
cluster (`python -m bench --scenarios affinity`)."""

from bench.affinity import render, summarize
from bench.llm import Timing


def turn(prompt: int, cached: int, tokens: int = 16) -> Timing:
    return Timing(start=0.0, first=0.1, end=0.2, tokens=tokens, cached_tokens=cached, prompt_tokens=prompt)


def test_the_cached_share_of_later_turns_is_shown_beside_what_a_perfect_cache_could_serve():
    # Turn 2's prompt: turn 1's 400 prompt tokens, its 16-token answer, and 84 new tokens.
    conversation = [turn(400, 0), turn(500, 400), turn(600, 516)]
    m = summarize([conversation])
    assert m["later_turns_cached_share"] == (400 + 516) / (500 + 600)
    assert m["later_turns_cacheable_share"] == (416 + 516) / (500 + 600)
    result = {
        "conversations": 1,
        "turns": 3,
        "replicas": 2,
        "workloads": {
            "pasted": {"system_prompt_chars": 10, "words_pasted_per_turn": 60, "turn_says": "go on"},
            "agent": {"system_prompt_chars": 10, "words_pasted_per_turn": 0, "turn_says": "next step."},
        },
        "results": {w: {"affinity_router": m, "serve_default_router": m} for w in ("pasted", "agent")},
        "later_turns_ttft_vs_default": {"pasted": 1.0, "agent": None},
    }
    text = render(result)
    assert "previous turn's prompt + answer" in text
    assert "| agent | Serve's default router |" in text and "60-word passage" in text


def test_the_agent_workload_says_little_per_turn_and_pastes_nothing():
    from bench.affinity import WORKLOADS, passage

    (_, _), (pasted, smoke), says = WORKLOADS["agent"]
    assert pasted == smoke == 0 and passage(1, 2, pasted) == "" and len(says.split()) < 10
