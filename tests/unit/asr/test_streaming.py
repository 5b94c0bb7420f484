"""The streaming session state machine (deployments/asr/streaming.py) and the replica's session
host (deployments/asr/session_host.py) with scripted speech probabilities and a recording
decoder: when partials are due, pauses finalise, 30 s cuts, caps, idle reclaim, lost sessions,
diarized sessions' speakers (fakes.level_voices for the speaker encoder)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from deployments.asr.engine import TranscribeOptions
from deployments.asr.session_host import SessionHost
from deployments.asr.streaming import RATE, VAD_WINDOW, SessionTable, StreamConfig, StreamSession, pcm16_samples
from deployments.asr.transcript import Segment, Transcript, Word
from deployments.diarization.spans import Span
from deployments.diarization.track import SpeakerTrack
from deployments.protocol.errors import APIError
from deployments.routing.affinity import replica_key
from tests.ingress.fakes import Engine, LoudVAD, pcm, session_host

W = VAD_WINDOW


def chunk(windows: int) -> np.ndarray:
    return np.full(windows * W, 0.1, np.float32)


def probs(pattern: str) -> np.ndarray:
    """'s' speech window, '.' silence window."""
    return np.array([0.9 if c == "s" else 0.05 for c in pattern])


def feed(session: StreamSession, pattern: str):
    return session.feed(chunk(len(pattern)), probs(pattern))


def test_pcm16_is_checked_and_scaled():
    assert pcm16_samples(np.array([0, 16384, -32768], "<i2").tobytes(), 100).tolist() == [0.0, 0.5, -1.0]
    for body, code in ((b"", "invalid_pcm"), (b"\x00" * 3, "invalid_pcm"), (b"\x00" * 102, "chunk_too_large")):
        with pytest.raises(APIError) as e:
            pcm16_samples(body, 100)
        assert e.value.status_code == 400 and e.value.code == code


def test_silence_keeps_only_the_preroll_and_asks_for_nothing():
    s = StreamSession("sid", None, StreamConfig())
    r = feed(s, "." * 100)  # 3.2 s of silence
    assert not r.cuts and not r.partial_due and not s.speech
    assert s.buffer_s == pytest.approx(0.3, abs=0.001) and s.start == 100 * W - int(0.3 * RATE)


def test_partials_at_most_once_per_half_second_of_new_audio():
    s = StreamSession("sid", None, StreamConfig())
    due = []
    for _ in range(12):  # 8 windows = 0.256 s per chunk
        due.append(feed(s, "s" * 8).partial_due)
        if due[-1]:
            s.partial_started()
            s.set_partial("hello")
    # 0.256 s -> not due; 0.512 s -> due; then every second chunk
    assert due == [False, True] * 6
    assert s.partial == "hello"


def test_a_pause_of_0_7_s_finalises_the_utterance():
    s = StreamSession("sid", None, StreamConfig())
    r = feed(s, "s" * 40 + "." * 21)  # 0.672 s of silence: not yet
    assert not r.cuts and r.speech_started == [0]
    r = feed(s, ".")  # 22 windows = 0.704 s
    assert len(r.cuts) == 1 and r.speech_stopped == [40 * W]
    cut = r.cuts[0]
    assert cut.start == 0 and cut.end == 62 * W and not cut.forced
    s.finalised(cut, " Hello there. ")
    assert s.text == "Hello there." and s.utterances[0].as_dict() == {
        "start": 0.0,
        "end": 1.984,
        "text": "Hello there.",
    }
    assert not s.speech and s.partial == ""
    r = feed(s, "s" * 10 + "." * 25)
    assert len(r.cuts) == 1 and r.cuts[0].start == 62 * W
    s.finalised(r.cuts[0], "Again.")
    assert s.text == "Hello there. Again."


def test_between_the_thresholds_speech_goes_on():
    s = StreamSession("sid", None, StreamConfig())
    s.feed(chunk(40), np.array([0.9] * 10 + [0.4] * 30))  # 0.4: above 0.35, below 0.5
    assert s.speech and not s.feed(chunk(1), np.array([0.4])).cuts


def test_an_utterance_is_cut_at_30_s():
    s = StreamSession("sid", None, StreamConfig())
    n = int(31 * RATE / W) + 1
    r = feed(s, "s" * n)
    assert len(r.cuts) == 1 and r.cuts[0].forced and len(r.cuts[0].audio) == 30 * RATE
    assert s.speech  # still speaking after the cut


def test_commit_and_manual_turns():
    s = StreamSession("sid", None, StreamConfig(auto_finalize=False))
    r = feed(s, "s" * 20 + "." * 60)  # a long pause: no server VAD, no cut, nothing trimmed
    assert not r.cuts and s.buffer_s == pytest.approx(80 * W / RATE, abs=0.001)
    cut = s.commit()
    assert cut is not None and len(cut.audio) == 80 * W and s.buffer_s == 0
    assert s.commit() is None
    auto = StreamSession("sid", None, StreamConfig())
    feed(auto, "." * 10)
    assert auto.commit() is None  # nothing but silence to finish


def test_table_caps_reclaims_and_names_the_replica():
    now = [0.0]
    table = SessionTable(2, 600, lambda token: replica_key("r1", token))
    a = table.create(None, StreamConfig(), clock=lambda: now[0])
    table.create(None, StreamConfig(), clock=lambda: now[0])
    with pytest.raises(APIError) as e:
        table.create(None, StreamConfig())
    assert e.value.status_code == 429 and e.value.headers["Retry-After"]
    assert a.sid.startswith("@r1/")
    now[0] = 601
    assert len(table.reclaim()) == 2 and table.get(a.sid) is None


def test_host_feeds_finalises_and_finishes():
    async def run():
        h, decoded = session_host()
        sid = (await h.create(Engine(), TranscribeOptions()))["sid"]
        answers = []
        for _ in range(4):
            answers.append(await h.feed(sid, pcm(0.3, True)))
            await asyncio.sleep(0.01)  # the background hypothesis runs
        # Due at 0.6 s and decoded in the background: the next answer shows it, kept until refreshed.
        assert [a["partial"] != "" for a in answers] == [False, False, True, True]
        assert [a["buffer_s"] for a in answers] == [0.3, 0.6, 0.9, 1.2]
        pause = await h.feed(sid, pcm(1.0, False))
        assert pause["utterance_final"] and pause["text"].startswith("utterance of") and pause["partial"] == ""
        assert pause["segments"][0]["start"] == 0.0 and pause["speech_stopped"]
        await h.feed(sid, pcm(0.1, True))  # with the pre-roll, under 0.5 s new: no partial
        done = await h.feed(sid, b"", finish=True)
        assert done["final"] and len(done["segments"]) == 2
        with pytest.raises(APIError) as e:
            await h.feed(sid, pcm(0.5, True))
        assert e.value.status_code == 404
        return decoded

    decoded = asyncio.run(run())
    assert len(decoded) == 4  # two partials, two finals


def test_host_tells_a_lost_session_from_an_unknown_one():
    async def run():
        h, _ = session_host()
        for sid, status in ((replica_key("r1", "nope"), 404), (replica_key("dead-replica", "x"), 410)):
            with pytest.raises(APIError) as e:
                await h.feed(sid, pcm(0.5, True))
            assert e.value.status_code == status, sid
            assert ("lost" in e.value.message) == (status == 410)

    asyncio.run(run())


def test_a_slow_hypothesis_never_holds_a_chunk_and_a_stale_one_is_dropped():
    async def run():
        release = asyncio.Event()
        asked: list[int] = []

        async def hypothesise(engine, options, samples):
            asked.append(len(samples))
            await release.wait()
            return "provisional words"

        h, decoded = session_host(hypothesise=hypothesise)
        sid = (await h.create(Engine(), TranscribeOptions()))["sid"]
        for _ in range(4):  # partials due twice, but the first never finishes: one in flight
            answer = await asyncio.wait_for(h.feed(sid, pcm(0.3, True)), 1.0)
            await asyncio.sleep(0.01)
        assert len(asked) == 1 and answer["partial"] == ""
        release.set()
        await asyncio.sleep(0.01)
        assert (await h.feed(sid, pcm(0.1, True)))["partial"] == "provisional words"
        # The next hypothesis is still decoding when a pause ends the utterance: it is dropped.
        release.clear()
        await h.feed(sid, pcm(0.5, True))
        await asyncio.sleep(0.01)
        assert len(asked) == 2
        pause = await h.feed(sid, pcm(1.0, False))
        release.set()
        await asyncio.sleep(0.01)
        assert pause["utterance_final"] and h.state(sid)["partial"] == ""
        assert len(decoded) == 1  # the final only: partials took the fast path
        return h.stats

    stats = asyncio.run(run())
    assert stats["partials"] == 1 and stats["finals"] == 1


def test_a_diarized_session_labels_every_segment_and_regroups_at_finish():
    async def run():
        h, _ = session_host()
        plain = (await h.create(Engine(), TranscribeOptions()))["sid"]
        sid = (await h.create(Engine(), TranscribeOptions(), speakers=SpeakerTrack()))["sid"]
        finalised = []
        for level in (8000, 16000, 8000):  # voices A, B, A (fakes.level_voices)
            await h.feed(sid, pcm(1.0, True, level=level))
            answer = await h.feed(sid, pcm(1.0, False))
            finalised += answer["finalised"]
        assert [f["speaker"] for f in finalised] == [0, 1, 0]  # provisional, as each ended
        await h.feed(sid, pcm(1.0, True, level=16000))
        done = await h.feed(sid, b"", finish=True)  # the open utterance is finalised by finish
        assert done["final"] and done["speakers"] == 2
        assert [s["speaker"] for s in done["segments"]] == [0, 1, 0, 1]
        await h.feed(plain, pcm(1.0, True))
        answer = await h.feed(plain, b"", finish=True)
        assert "speakers" not in answer and "speaker" not in answer["segments"][0]

    asyncio.run(run())


def test_a_diarized_session_needs_the_hosts_voices():
    async def run():
        h, _ = session_host(voices=None)
        with pytest.raises(ValueError):
            await h.create(Engine(), TranscribeOptions(), speakers=SpeakerTrack())
        assert len(h.table) == 0

    asyncio.run(run())


def test_host_counts_its_open_sessions_per_model():
    async def run():
        h, _ = session_host()
        first = (await h.create(Engine(), TranscribeOptions()))["sid"]
        await h.create(Engine(), TranscribeOptions())
        assert h.live_by_model() == {Engine().model_id: 2}
        h.delete(first)
        assert h.live_by_model() == {Engine().model_id: 1}

    asyncio.run(run())


def test_a_diarized_utterance_is_timed_by_its_words_and_cut_where_the_voice_changes():
    async def decode(engine, options, samples):
        assert options.word_timestamps  # asked for by the replica for a diarized session
        words = [Word(" Hello?", 0.1, 0.4), Word(" Hi,", 0.6, 0.8), Word(" there.", 0.8, 0.9)]
        return Transcript.join([Segment(0, 0.0, 1.0, " Hello? Hi, there.", words=words)], "en", 1.0)

    async def two_voices(samples):  # the first half one voice, the second another
        half = len(samples) / 16000 / 2
        return [Span(0.0, half), Span(half, 2 * half)], np.array([[1.0, 0.0], [0.0, 1.0]])

    async def run():
        async def engine_for(model):
            return Engine()

        h = SessionHost(
            "r1",
            decode,
            engine_for,
            max_sessions=1,
            idle_timeout_s=600,
            max_chunk_s=10,
            vad=LoudVAD(),
            voices=two_voices,
        )
        sid = (await h.create(Engine(), TranscribeOptions(word_timestamps=True), speakers=SpeakerTrack()))["sid"]
        await h.feed(sid, pcm(0.5, False))
        await h.feed(sid, pcm(1.0, True))
        return await h.feed(sid, b"", finish=True)

    done = asyncio.run(run())
    start = done["finalised"][0]["start"]  # the utterance's start in the stream
    assert [(s["text"], s["speaker"]) for s in done["segments"]] == [("Hello?", 0), ("Hi, there.", 1)]
    assert [s["start"] for s in done["segments"]] == pytest.approx([start + 0.1, start + 0.6], abs=0.001)
    assert done["speakers"] == 2 and done["finalised"][0]["speaker"] == 0


# ------------------------------------------------------------------ semantic turns (semantic_vad)


@pytest.mark.parametrize(
    "text, complete",
    [
        ("What is the weather in Paris?", True),
        ("Thank you.", True),
        ("Book a table for two!", True),
        ("", True),  # noise: not held
        ("I want to go to the", False),  # no sentence end
        ("I would like to book a flight to", False),
        ("Let me think...", False),  # trailing off
        ("So, um,", False),
        ("I went there and.", False),  # Whisper's full stop on a dangling conjunction
        ("Call my", False),
        ("今天天气怎么样？", True),  # a multilingual model's CJK question mark
        ("我想去", False),
    ],
)
def test_sounds_complete(text, complete):
    from deployments.asr.streaming import sounds_complete

    assert sounds_complete(text) is complete


def test_a_semantic_pause_asks_once_and_the_longest_pause_ends_the_turn():
    s = StreamSession("sid", None, StreamConfig(pause_s=0.5, max_pause_s=2.0))
    feed(s, "s" * 20)
    r = feed(s, "." * 16)  # 0.51 s: the words are to be judged, nothing cut yet
    assert r.end_check and not r.cuts and s.speech
    assert not feed(s, "." * 16).end_check  # the same pause is asked about once
    r = feed(s, "s" * 4 + "." * 16)  # more speech, a new pause: asked again
    assert r.end_check and not r.cuts
    r = feed(s, "." * 50)  # 2 s of silence in all: ended whatever the words
    assert len(r.cuts) == 1 and r.speech_stopped and not r.end_check


def test_end_turn_cuts_the_utterance_where_its_words_sounded_finished():
    s = StreamSession("sid", None, StreamConfig(pause_s=0.5, max_pause_s=2.0))
    feed(s, "s" * 20)
    assert feed(s, "." * 16).end_check
    cut, stopped = s.end_turn()
    assert stopped == 20 * W and cut.end == 36 * W and not s.speech and s.buffer_s == 0


def test_the_host_ends_a_turn_at_a_pause_only_when_its_words_sound_finished():
    """A semantic session on the host: at the first pause the words so far are decoded ("I want
    to go to the": unfinished, held); more speech, a pause after "... to the park." ends the
    turn there, and its decode is the final (not decoded twice)."""

    async def run():
        words = iter(["I want to go to the", "I want to go to the park."])
        decoded = []

        async def decode(engine, options, samples):
            decoded.append(len(samples))
            return Transcript.join([Segment(0, 0.0, 0.0, next(words))], "en", 0.0)

        async def engine_for(model):
            return Engine()

        h = SessionHost("r1", decode, engine_for, max_sessions=2, idle_timeout_s=600, max_chunk_s=10, vad=LoudVAD())
        overrides = {"pause_s": 0.5, "max_pause_s": 4.0, "partial_every_s": 1e9}
        sid = (await h.create(Engine(), TranscribeOptions(), overrides))["sid"]
        await h.feed(sid, pcm(1.0, True))
        held = await h.feed(sid, pcm(0.6, False))
        assert not held["utterance_final"] and not held["speech_stopped"] and held["text"] == ""
        await h.feed(sid, pcm(0.5, True))
        ended = await h.feed(sid, pcm(0.6, False))
        assert ended["utterance_final"] and ended["text"] == "I want to go to the park."
        assert ended["speech_stopped"] == [pytest.approx(2.1, abs=0.032)]  # one VAD window
        return decoded, h.stats

    decoded, stats = asyncio.run(run())
    assert len(decoded) == 2 and stats["end_checks"] == 2 and stats["finals"] == 1
