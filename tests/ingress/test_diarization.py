"""The diarizing forms in process (fake ASR slot): what the routes send the slot (options, the
known speakers' clips decoded to 16 kHz samples) and how they render a diarized answer
(verbose_json, diarized_json in the openai SDK's type, srt, vtt, streamed diarized_json's
events; /v1/audio/diarization as JSON and RTTM). The bad inputs are in tests/corpus/bad_audio.py (tests/ingress/test_bad_input_audio.py)."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from openai.types.audio import TranscriptionDiarized, TranscriptionTextSegmentEvent

from deployments.asr.formats import diarized_json
from deployments.asr.transcript import Segment, Transcript
from deployments.diarization.spans import Diarization, Turn
from tests.assertions import assert_openai_error
from tests.corpus.bad_audio import REFERENCE, TINY_ASR, WAV
from tests.ingress import fakes
from tests.ingress.conftest import default_slots

LABELS = ["ann", "A"]


def diarized_transcript(params, audio, server_path, references=None, model=None) -> Transcript:
    t = Transcript.join(
        [Segment(id=0, start=0.0, end=1.5, text=" Hello there."), Segment(id=0, start=2.0, end=3.0, text=" Hi.")],
        "en",
        3.2,
    )
    t.label_speakers(
        lambda start, end: 0 if start < 1 else 1, Diarization([], LABELS, 3.2, frozenset({"ann"})).labels_of
    )
    return t


def diarization(params, audio, references=None, model=None) -> Diarization:
    return Diarization([Turn(0.0, 1.5, 0), Turn(2.0, 3.0, 1)], LABELS, 3.2)


@pytest.fixture
def slots():
    return {**default_slots(), "asr": fakes.FakeClient(transcribe=diarized_transcript, diarize=diarization)}


def form(**data):
    return {"files": {"file": ("a.wav", WAV)}, "data": {"model": TINY_ASR, **data}}


async def test_verbose_json_gets_a_speaker_per_segment(http, slots):
    r = await http.post("/v1/audio/transcriptions", **form(diarize="1", response_format="verbose_json"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert [s["speaker"] for s in body["segments"]] == [0, 1]
    assert body["speakers"] == 2 and body["speaker_labels"] == LABELS
    method, args, _ = slots["asr"].calls[0]
    assert method == "transcribe" and args[0].diarized and args[3] == {}


async def test_raw_body_takes_diarize_in_the_query(http, slots):
    r = await http.post(
        "/v1/audio/transcriptions", params={"diarize": "1", "response_format": "verbose_json"}, content=WAV
    )
    assert r.status_code == 200, r.text
    assert r.json()["speakers"] == 2


async def test_diarized_json_has_openais_shape_and_known_speakers_reach_the_slot(http, slots):
    r = await http.post(
        "/v1/audio/transcriptions",
        **form(
            response_format="diarized_json",
            **{"known_speaker_names[]": ["ann"], "known_speaker_references[]": [REFERENCE]},
        ),
    )
    assert r.status_code == 200, r.text
    result = TranscriptionDiarized.model_validate(r.json())
    assert [(s.speaker, s.text, s.type) for s in result.segments] == [
        ("ann", "Hello there.", "transcript.text.segment"),
        ("A", "Hi.", "transcript.text.segment"),
    ]
    assert result.task == "transcribe" and result.usage.seconds == pytest.approx(3.2)
    params, references = slots["asr"].calls[0][1][0], slots["asr"].calls[0][1][3]
    assert params.known_speaker_names == ["ann"] and params.known_speaker_references == []  # sent as samples
    assert list(references) == ["ann"] and references["ann"].dtype == np.float32
    assert len(references["ann"]) == 40000  # 2.5 s at 16 kHz


async def test_json_body_with_diarize(http, slots):
    body = {"file": base64.b64encode(WAV).decode(), "diarize": True, "response_format": "verbose_json"}
    r = await http.post("/v1/audio/transcriptions", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["speakers"] == 2


async def test_srt_and_vtt_prefix_the_speaker(http):
    srt = (await http.post("/v1/audio/transcriptions", **form(diarize="true", response_format="srt"))).text
    assert "ann: Hello there." in srt and "A: Hi." in srt
    vtt = (await http.post("/v1/audio/transcriptions", **form(diarize="true", response_format="vtt"))).text
    assert vtt.startswith("WEBVTT") and "<v ann>Hello there." in vtt and "<v A>Hi." in vtt


async def test_plain_transcription_has_no_speaker_fields(http, slots):
    slots["asr"].answers["transcribe"] = fakes.transcript()
    r = await http.post("/v1/audio/transcriptions", **form(response_format="verbose_json"))
    assert r.status_code == 200, r.text
    assert "speakers" not in r.json() and "speaker" not in r.json()["segments"][0]
    assert len(slots["asr"].calls[0][1]) == 3  # no references argument


async def test_diarization_route_json_and_rttm(http, slots):
    r = await http.post("/v1/audio/diarization", files={"file": ("meeting one.wav", WAV)}, data={"num_speakers": "2"})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "duration": 3.2,
        "speakers": LABELS,
        "segments": [{"start": 0.0, "end": 1.5, "speaker": "ann"}, {"start": 2.0, "end": 3.0, "speaker": "A"}],
    }
    assert slots["asr"].calls[0][1][0].num_speakers == 2
    r = await http.post("/v1/audio/diarization", params={"response_format": "rttm"}, content=WAV)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert r.text.splitlines() == [
        "SPEAKER audio 1 0.000 1.500 <NA> <NA> ann <NA> <NA>",
        "SPEAKER audio 1 2.000 1.000 <NA> <NA> A <NA> <NA>",
    ]
    r = await http.post(
        "/v1/audio/diarization", files={"file": ("meeting one.wav", WAV)}, data={"response_format": "rttm"}
    )
    assert r.text.startswith("SPEAKER meeting_one 1 ")


def diarized_events(params, audio, server_path, references=None, model=None):
    """What the ASR slot streams for diarized_json: deltas naming their segment, the labelled
    segments, then done."""
    segments = diarized_json(diarized_transcript(params, audio, server_path))["segments"]
    yield from ({"type": "transcript.text.delta", "delta": s["text"], "segment_id": s["id"]} for s in segments)
    yield from segments
    yield {"type": "transcript.text.done", "text": "Hello there. Hi.", "usage": {"type": "duration", "seconds": 3.2}}


async def test_streamed_diarized_json_sends_the_segment_events(http, slots):
    slots["asr"].answers["transcribe_stream"] = diarized_events
    data = {"stream": "true", "response_format": "diarized_json", "known_speaker_names[]": ["ann"]}
    r = await http.post("/v1/audio/transcriptions", **form(**data, **{"known_speaker_references[]": [REFERENCE]}))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.text
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events] == ["transcript.text.delta"] * 2 + ["transcript.text.segment"] * 2 + [
        "transcript.text.done"
    ]
    segments = [TranscriptionTextSegmentEvent.model_validate(e) for e in events[2:4]]
    assert [(s.id, s.speaker, s.text) for s in segments] == [("seg_0", "ann", "Hello there."), ("seg_1", "A", "Hi.")]
    assert [e["segment_id"] for e in events[:2]] == ["seg_0", "seg_1"]
    method, (params, _, _, references), _ = slots["asr"].calls[0]
    assert method == "transcribe_stream" and params.stream and params.diarized
    assert list(references) == ["ann"] and params.known_speaker_references == []


async def test_streamed_diarization_needs_diarized_json(http, slots):
    r = await http.post("/v1/audio/transcriptions", **form(stream="true", diarize="1"))
    assert "no place for speakers" in assert_openai_error(r, 400, param="response_format")["message"]
    assert slots["asr"].calls == []
