"""The sustained-burst benchmark's arithmetic (bench/burst.py): completions per window and per
5 s bucket, time to first audio by the bucket a request started in, replicas per bucket."""

from bench.burst import summarize


def record(start: float, end: float, ttfa: float = 0.1) -> dict:
    return {"start": start, "end": end, "ttfa": ttfa, "bytes": 480}


def test_windows_count_completions_inside_the_burst_only():
    records = [record(0, 1), record(1, 19.9), record(30, 41), record(42, 59.9), record(50, 60.5)]
    timeline = [(0.0, 1), (12.0, 2), (59.5, 3)]
    s = summarize(records, timeline, seconds=60.0)
    assert (s["first_window_completed"], s["last_window_completed"]) == (2, 2)
    assert s["last_over_first"] == 1.0
    assert s["completed_per_s"] == 4 / 60  # the one that ended after 60 s is answered, not counted
    assert s["peak_replicas"] == 3 and s["audio_bytes"] == [480]


def test_buckets_group_by_five_seconds():
    records = [record(0, 2, ttfa=0.2), record(1, 4, ttfa=0.4), record(6, 9, ttfa=1.0)]
    s = summarize(records, [(0.0, 1), (7.0, 2)], seconds=10.0)
    first, second = s["buckets"]
    assert first == {"t_s": 0.0, "completed_per_s": 0.4, "ttfa_p50_ms": 300.0, "ttfa_p95_ms": 390.0, "replicas": 1}
    assert second["completed_per_s"] == 0.2 and second["ttfa_p50_ms"] == 1000.0 and second["replicas"] == 2
