"""The restart scenario's figures and its place among the scenarios (bench/restart.py); the
scenario itself runs on a Ray cluster (`python -m bench --scenarios restart`)."""

from bench.__main__ import parse_args
from bench.restart import render, summarize


def test_a_repeat_reports_both_ttfts_and_their_ratio():
    m = summarize(cold=800.0, after=100.0, cached=3999, prompt=4000)
    assert m == {
        "cold_ttft_ms": 800.0,
        "after_restart_ttft_ms": 100.0,
        "after_restart_vs_cold": 0.125,
        "after_restart_cached_tokens": 3999,
        "prompt_tokens": 4000,
    }
    assert summarize(cold=0.0, after=5.0, cached=None, prompt=None)["after_restart_vs_cold"] is None


def test_the_table_names_every_system_and_the_target():
    result = {
        "prefix_words": 3300,
        "results": {
            "graph": summarize(800.0, 100.0, 3999, 4000),
            "graph_no_disk_tier": summarize(800.0, 790.0, 0, 4000),
            "mlx_lm_server": summarize(700.0, 700.0, 0, 4000),
        },
    }
    text = render(result)
    assert "this graph (disk tier)" in text and "mlx_lm.server (peer)" in text and "at most 0.2" in text


def test_it_is_a_scenario_on_request():
    assert parse_args(["--smoke", "--scenarios", "restart"]).scenarios == ["restart"]
