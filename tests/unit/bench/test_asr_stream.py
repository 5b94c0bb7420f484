"""bench/asr_stream.py's pure parts: the stream's utterance spans, the summary of sessions (a
peer without per-chunk answers has no chunk RTT), and the table with both systems."""

from __future__ import annotations

import pytest

from bench import asr_stream


def test_the_spans_are_where_the_utterances_are_in_the_stream():
    pcm, spans = asr_stream.speech()
    total = len(pcm) / 2 / asr_stream.RATE
    (s0, e0), (s1, e1) = spans
    assert s0 == pytest.approx(0.3) and e1 == pytest.approx(total - 1.0)
    assert e1 > s1 == pytest.approx(e0 + 1.0) and e0 > s0
    assert sum(len(c) for c in asr_stream.chunks(pcm)) == len(pcm)


def test_summary_and_table_with_a_peer_that_answers_no_chunks():
    graph = [{"rtts": [0.01, 0.02, 0.03], "partials": [0.8], "finals": [1.5, 2.5], "finish": 0.02, "text": "a"}]
    peer = [{"rtts": [], "partials": [1.6], "finals": [2.0], "finish": None, "text": "a"}]
    g, p = asr_stream.summary(graph), asr_stream.summary(peer)
    assert g["chunk_rtt_p50_ms"] == pytest.approx(20) and g["finals"] == 2 and g["finish_p50_ms"] == pytest.approx(20)
    assert p["chunk_rtt_p50_ms"] is None and p["finish_p50_ms"] is None and p["speech_end_to_final_p50_ms"] == 2000
    result = {"results": {"graph": {"1": g}, "mlx_audio_server": {"1": p}}, "texts": {}, "failed": False}
    table = asr_stream.render(result)
    assert "| mlx_audio_server | 1 | - | - | 1600 |" in table and "| graph | 1 | 20 |" in table
