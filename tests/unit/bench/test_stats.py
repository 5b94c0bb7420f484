"""The benchmark harness's pure parts: statistics, the LLM wave metrics and targets, tables."""

import pytest

from bench.llm import Timing, targets, wave_metrics
from bench.model import BENCH_CONFIG, SMOKE_CONFIG, parameter_count
from bench.report import table
from bench.stats import median_over_repeats, percentile, ratio


def test_percentile_interpolates_and_handles_empty():
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([0.0, 10.0], 95) == pytest.approx(9.5)


def test_median_over_repeats_is_per_metric():
    assert median_over_repeats([{"a": 1, "b": 5}, {"a": 3, "b": None}, {"a": 2, "b": 7}]) == {"a": 2, "b": 6}


def test_wave_metrics_from_request_timings():
    # Two requests started at 0: first text at 0.1 and 0.3 s, ends at 1.0 and 2.0 s, 11 tokens each.
    timings = [Timing(0.0, 0.1, 1.0, 11), Timing(0.0, 0.3, 2.0, 11)]
    m = wave_metrics(timings, 0.0)
    assert m["tokens_per_s"] == pytest.approx(22 / 2.0)
    assert m["ttft_p50_ms"] == pytest.approx(200.0)
    assert m["itl_p50_ms"] == pytest.approx((90 + 170) / 2)
    assert m["prompt_tokens_per_s"] is None  # no usage.prompt_tokens reported


def test_prompt_tokens_per_s_is_prompt_tokens_over_the_time_waiting_for_first_tokens():
    together = [Timing(0.0, 0.1, 1.0, 11, prompt_tokens=30), Timing(0.0, 0.3, 2.0, 11, prompt_tokens=50)]
    assert wave_metrics(together, 0.0)["prompt_tokens_per_s"] == pytest.approx(80 / 0.3)
    in_a_row = [Timing(0.0, 0.1, 1.0, 11, prompt_tokens=30), Timing(1.0, 1.3, 2.0, 11, prompt_tokens=50)]
    assert wave_metrics(in_a_row, 0.0)["prompt_tokens_per_s"] == pytest.approx(80 / 0.4)


def test_targets_compare_within_the_run():
    res = {
        "graph": {"1": {"ttft_p50_ms": 30.0, "tokens_per_s": 10.0}, "16": {"tokens_per_s": 120.0}},
        "mlx_lm_server": {"16": {"tokens_per_s": 100.0}},
        "in_process": {"1": {"ttft_p50_ms": 10.0}, "16": {"tokens_per_s": 150.0}},
        "graph_no_batching": {"16": {"tokens_per_s": 40.0}},
    }
    t = targets(res, [1, 16])
    assert t["tokens_per_s_vs_mlx_lm_server_at_16"] == {"value": 1.2, "target": ">= 1.2", "met": True}
    assert t["tokens_per_s_vs_in_process_at_16"]["met"] is False
    assert (
        t["ttft_p50_over_in_process_ms_at_1"]["value"] == 20.0 and t["ttft_p50_over_in_process_ms_at_1"]["met"] is False
    )
    assert t["batching_speedup_at_max_concurrency"]["value"] == 3.0
    assert t["best_configuration_vs_peer_at_16"]["value"] == 1.2  # only one configuration each ran
    assert ratio(1.0, 0) is None


def test_best_configuration_compares_each_side_at_its_best():
    res = {
        "graph": {"16": {"tokens_per_s": 120.0}},
        "graph_per_core": {"16": {"tokens_per_s": 180.0}},
        "mlx_lm_server": {"16": {"tokens_per_s": 100.0}},
        "mlx_lm_server_all_cores": {"16": {"tokens_per_s": 160.0}},
    }
    best = targets(res, [16])["best_configuration_vs_peer_at_16"]
    assert best["value"] == pytest.approx(180.0 / 160.0) and best["met"] is False
    res["mlx_lm_server_all_cores"]["16"]["tokens_per_s"] = 90.0  # more threads can also lose
    assert targets(res, [16])["best_configuration_vs_peer_at_16"]["value"] == pytest.approx(1.8)


def test_benchmark_model_is_in_the_asked_range():
    assert 90e6 < parameter_count(BENCH_CONFIG) < 300e6
    assert parameter_count(SMOKE_CONFIG) < 1e6


def test_table_is_markdown():
    assert table(["a", "b"], [[1, None], [0.12345, 1234.5]]).splitlines() == [
        "| a | b |",
        "|---|---|",
        "| 1 | - |",
        "| 0.123 | 1234 |",
    ]
