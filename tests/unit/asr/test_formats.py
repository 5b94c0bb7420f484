"""Transcript building (whisper timestamp tokens -> segments), response formats, batching modes."""

from __future__ import annotations

import json
import math
from typing import get_args

import pytest

from deployments.asr.config import ASRSlotConfig, effective_batching, parse_mode
from deployments.asr.formats import CONTENT_TYPES, render, timestamp
from deployments.asr.transcript import Segment, TimestampVocabulary, Transcript, Word, segments_from_tokens
from deployments.diarization.spans import Diarization
from deployments.protocol.transcription import ResponseFormat

VOCAB = TimestampVocabulary(timestamp_begin=1000, eot=999)


def ts(seconds: float) -> int:
    return 1000 + round(seconds / 0.02)


def decode(tokens):
    return " ".join(f"w{t}" for t in tokens)


def test_segments_from_timestamp_pairs():
    tokens = [ts(0.0), 1, 2, ts(2.5), ts(2.5), 3, ts(4.0), 999, 7]
    assert segments_from_tokens(tokens, VOCAB, decode, window_s=10.0) == [
        (0.0, 2.5, [1, 2], "w1 w2"),
        (2.5, 4.0, [3], "w3"),
    ]


def test_unclosed_and_untimed_text_is_kept_and_clipped_to_the_window():
    assert segments_from_tokens([1, 2], VOCAB, decode, 3.0) == [(0.0, 3.0, [1, 2], "w1 w2")]
    assert segments_from_tokens([ts(1.0), 5, ts(29.0)], VOCAB, decode, 6.0) == [(1.0, 6.0, [5], "w5")]
    assert segments_from_tokens([ts(1.0), ts(2.0)], VOCAB, decode, 6.0) == []


def transcript() -> Transcript:
    segments = [
        Segment(0, 0.0, 2.5, " Hello there.", words=[Word(" Hello", 0.0, 0.5, 0.9), Word(" there.", 0.5, 2.5, 0.8)]),
        Segment(0, 3661.25, 3662.0, " Bye.", avg_logprob=-0.2),
    ]
    segments[1] = segments[1].shifted(0.0)
    return Transcript.join(segments, "en", 3662.0)


def test_join_numbers_segments_and_joins_text():
    t = transcript()
    assert [s.id for s in t.segments] == [0, 1]
    assert t.text == "Hello there. Bye."


def test_shifted_moves_segment_and_words_and_drops_nan():
    s = Segment(0, 1.0, 2.0, "x", avg_logprob=math.nan, words=[Word("x", 1.0, 1.5, math.nan)]).shifted(30.0)
    assert (s.start, s.end, s.words[0].start, s.words[0].end) == (31.0, 32.0, 31.0, 31.5)
    assert s.avg_logprob == 0.0 and s.words[0].probability is None
    json.dumps(s.__dict__, default=lambda o: o.__dict__)  # JSON-safe


def test_json_and_text():
    assert render(transcript(), "json") == ({"text": "Hello there. Bye."}, "application/json")
    body, ctype = render(transcript(), "text")
    assert body == "Hello there. Bye.\n" and ctype.startswith("text/plain")


def test_verbose_json_has_openai_fields_and_words_on_request():
    body, _ = render(transcript(), "verbose_json", include_words=True)
    assert body["language"] == "en" and body["duration"] == 3662.0 and body["text"] == "Hello there. Bye."
    seg = body["segments"][1]
    assert {
        "id",
        "seek",
        "start",
        "end",
        "text",
        "tokens",
        "temperature",
        "avg_logprob",
        "compression_ratio",
        "no_speech_prob",
    } <= set(seg)
    assert (seg["id"], seg["start"], seg["end"]) == (1, 3661.25, 3662.0)
    assert body["words"] == [
        {"word": " Hello", "start": 0.0, "end": 0.5, "probability": 0.9},
        {"word": " there.", "start": 0.5, "end": 2.5, "probability": 0.8},
    ]
    assert "words" not in render(transcript(), "verbose_json")[0]
    json.dumps(body)


def test_srt_and_vtt():
    srt, ctype = render(transcript(), "srt")
    assert ctype == CONTENT_TYPES["srt"]
    assert srt == "1\n00:00:00,000 --> 00:00:02,500\nHello there.\n\n2\n01:01:01,250 --> 01:01:02,000\nBye.\n"
    vtt, ctype = render(transcript(), "vtt")
    assert ctype.startswith("text/vtt")
    assert vtt == "WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello there.\n\n01:01:01.250 --> 01:01:02.000\nBye.\n"
    assert timestamp(59.9996, ",") == "00:01:00,000"


@pytest.mark.parametrize(
    "mode, max_batch, expected",
    [
        ("off", None, (1, 0.0)),
        ("None", None, (1, 0.0)),
        ("1", None, (1, 0.0)),
        ("interactive", None, (4, 0.010)),
        (" LOW-LATENCY ", None, (4, 0.010)),
        ("conversational", None, (8, 0.025)),
        ("balanced", None, (8, 0.025)),
        ("default", None, (8, 0.025)),
        ("offline", None, (32, 0.150)),
        ("throughput", None, (32, 0.150)),
        ("batch", None, (32, 0.150)),
        ("nonsense", None, (8, 0.025)),
        ("offline", 3, (3, 0.150)),
        ("offline", 1, (1, 0.0)),
        ("off", 4, (4, 0.0)),
    ],
)
def test_ominix_batching_modes(mode, max_batch, expected):
    got = effective_batching(mode, max_batch)
    assert (got.max_batch_size, got.wait_s) == expected


def test_mode_env_overrides():
    from graphs.config import GraphArgs

    config = GraphArgs.from_args({}, {"ASR_MODE": "Interactive", "ASR_MAX_BATCH": "6", "ASR_MODEL_DIR": "/m"})
    assert config.asr.batching().max_batch_size == 6 and config.asr.batching().wait_s == 0.010
    assert config.asr.default_model == "/m"
    assert config.catalog()["asr"]["models"][0] == "/m"
    with pytest.raises(ValueError, match="ASR_MAX_BATCH"):
        GraphArgs.from_args({}, {"ASR_MAX_BATCH": "0"})
    assert parse_mode("OFFLINE") == "offline"
    assert ASRSlotConfig(mode="throughput").mode == "offline"
    assert GraphArgs.from_args({"asr": {"enabled": False}}, {}).catalog().get("asr") is None


def test_upload_limits():
    from deployments.asr.limits import check_duration, check_upload_size
    from deployments.protocol.errors import APIError

    check_upload_size(1024 * 1024, 1.0)
    with pytest.raises(APIError) as info:
        check_upload_size(1024 * 1024 + 1, 1.0)
    assert info.value.status_code == 413
    check_duration(60.0, 60.0)
    with pytest.raises(APIError) as info:
        check_duration(61.0, 60.0)
    assert info.value.status_code == 400 and info.value.code == "audio_too_long"


def test_server_files_only_inside_the_configured_directory(tmp_path):
    from deployments.asr.limits import read_server_file
    from deployments.protocol.errors import APIError

    root = tmp_path / "audio"
    root.mkdir()
    (root / "a.wav").write_bytes(b"RIFF....")
    (tmp_path / "secret.wav").write_bytes(b"secret")
    (root / "escape.wav").symlink_to(tmp_path / "secret.wav")
    assert read_server_file(str(root / "a.wav"), str(root), 1.0) == b"RIFF...."
    for path, files_dir, words in [
        (str(root / "a.wav"), None, "not accepted"),
        (str(tmp_path / "secret.wav"), str(root), "outside"),
        (str(root / ".." / "secret.wav"), str(root), "outside"),
        (str(root / "escape.wav"), str(root), "outside"),
        (str(root / "missing.wav"), str(root), "not a file"),
    ]:
        with pytest.raises(APIError, match=words) as info:
            read_server_file(path, files_dir, 1.0)
        assert info.value.status_code == 400
    with pytest.raises(APIError) as info:
        read_server_file(str(root / "a.wav"), str(root), 1e-6)
    assert info.value.status_code == 413


@pytest.mark.parametrize("response_format", get_args(ResponseFormat))
def test_every_format_a_request_may_ask_for_renders(response_format):
    transcript = Transcript.join([Segment(id=0, start=0.0, end=1.5, text="Hello there.")], "en", 1.5)
    body, content_type = render(transcript, response_format)
    assert content_type == CONTENT_TYPES[response_format]
    assert "Hello there." in (body["text"] if isinstance(body, dict) else body)


KNOWN = frozenset({"ann"})


def diarized() -> Transcript:
    """Cluster 2 (B) speaks first, then cluster 0 (ann, a known speaker); cluster 1 nowhere."""
    t = transcript()
    t.label_speakers(
        lambda start, end: 0 if start > 3000 else 2, Diarization([], ["ann", "A", "B"], 0, KNOWN).labels_of
    )
    return t


def test_label_speakers_numbers_the_speakers_the_segments_name_from_0():
    t = diarized()
    assert [s.speaker for s in t.segments] == [0, 1]  # in order of first appearance
    assert t.speaker_labels == ["A", "ann"]  # the unnamed one lettered again: A, not B
    empty = Transcript.join([Segment(0, 0.0, 1.0, " Hi.")], "en", 1.0)
    empty.label_speakers(lambda start, end: None, Diarization([], [], 1.0).labels_of)  # no speech found: one speaker
    assert empty.speaker_labels == ["A"] and empty.segments[0].speaker == 0


def test_diarized_formats():
    verbose, _ = render(diarized(), "verbose_json")
    assert [s["speaker"] for s in verbose["segments"]] == [0, 1]
    assert verbose["speakers"] == 2 and verbose["speaker_labels"] == ["A", "ann"]
    plain, _ = render(transcript(), "verbose_json")
    assert "speakers" not in plain and "speaker" not in plain["segments"][0]
    body, content_type = render(diarized(), "diarized_json")
    assert content_type == "application/json"
    assert body["segments"][0] == {
        "type": "transcript.text.segment",
        "id": "seg_0",
        "start": 0.0,
        "end": 2.5,
        "text": "Hello there.",
        "speaker": "A",
    }
    assert body["usage"] == {"type": "duration", "seconds": 3662.0} and body["task"] == "transcribe"
    assert "\nA: Hello there.\n" in render(diarized(), "srt")[0]
    assert "\n<v ann>Bye.\n" in render(diarized(), "vtt")[0]
    assert "\nHello there.\n" in render(transcript(), "srt")[0]  # undiarized: no prefix
