"""Voice training jobs in process, over fake ASR and TTS slots: the pipeline's stages and calls,
SSE progress with replay, cancel at once, one job at a time, the state file, every error."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import httpx
import numpy as np
import pytest

from deployments.audio.encode import encode_wav
from deployments.ingress.app import create_app
from deployments.ingress.serving.training import VoiceTraining
from deployments.voices.jobs import FIT_STEPS
from graphs.config import GraphArgs
from tests.assertions import assert_openai_error
from tests.ingress import fakes
from tests.ingress.conftest import default_slots, ingress_state, shipped_args

RATE = fakes.SAMPLE_RATE


def clip(seconds: float = 2.0, silence: float = 0.5) -> bytes:
    t = np.arange(int(seconds * RATE)) / RATE
    tone = (0.4 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    pad = np.zeros(int(silence * RATE), np.float32)
    return encode_wav(np.concatenate([pad, tone, pad]), RATE)


def body(**changes) -> dict:
    return {"voice_name": "narrator", "audio": base64.b64encode(clip()).decode(), **changes}


class Recorder:
    """The TTS slot's two training calls, recorded; `delay_s` makes the first one slow."""

    def __init__(self, delay_s: float = 0.0):
        self.delay_s = delay_s
        self.cancelled = False
        self.conditioned: list[tuple] = []
        self.registered: list[tuple] = []

    async def cache_conditioning(self, name, samples, model=None):
        try:
            await asyncio.sleep(self.delay_s)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        self.conditioned.append((name, samples))
        return {
            "ref_audio": f"/v/{name}.wav",
            "conditioning": f"/v/{name}.pocket_tts.safetensors",
            "conditioning_model": "m",
        }

    def register_trained_voice(self, name, files, ref_text, language, model=None):
        self.registered.append((name, files, ref_text, language))
        return {"name": name}


@pytest.fixture
def recorder():
    return Recorder()


@pytest.fixture
def slots(recorder):
    slots = default_slots()
    slots["tts"].answers.update(
        cache_conditioning=recorder.cache_conditioning, register_trained_voice=recorder.register_trained_voice
    )
    return slots


async def events(http, task_id) -> list[dict]:
    r = await http.get("/v1/voices/train/progress", params={"task_id": task_id})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    return [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]


async def test_a_job_runs_every_stage_and_registers_the_voice(http, slots, recorder):
    r = await http.post("/v1/voices/train", json=body(language="en"))
    assert r.status_code == 200, r.text
    task = r.json()
    assert task["status"] == "accepted" and task["task_id"].startswith("train-")
    seen = await events(http, task["task_id"])
    assert seen[-1]["stage"] == "complete" and seen[-1]["is_complete"] and seen[-1]["progress"] == 1.0
    stages = [e["stage"] for e in seen]
    order = ["audio_slicing", "denoising", "feature_extraction", "voice_conditioning", "registering_voice", "complete"]
    assert [s for s in order if s in stages] == [s for s in stages if s in order]  # in order
    status = (await http.get("/v1/voices/train/status", params={"task_id": task["task_id"]})).json()
    assert status["status"] == "complete" and status["voice_name"] == "narrator" and status["completed_at"]
    # the clip's silent ends were cut: 2 s of tone at the model's rate reach the TTS slot
    name, samples = recorder.conditioned[0]
    assert name == "narrator" and abs(len(samples) // 4 - 2 * RATE) < RATE // 50
    # no transcript given: the ASR slot's is registered with the voice
    assert recorder.registered[0][2] == "hello world" and recorder.registered[0][3] == "en"
    assert slots["asr"].calls[0][0] == "transcribe"


async def test_a_given_transcript_skips_the_asr_slot_and_multipart_works(http, slots, recorder):
    files = {"audio": ("me.wav", clip(), "audio/wav")}
    r = await http.post("/v1/voices/train", data={"voice_name": "me", "transcript": "A tone."}, files=files)
    assert r.status_code == 200, r.text
    assert (await events(http, r.json()["task_id"]))[-1]["stage"] == "complete"
    assert recorder.registered[0][:1] == ("me",) and recorder.registered[0][2] == "A tone."
    assert not slots["asr"].calls


async def test_cancel_ends_the_job_at_once_and_the_slot_call_with_it(http, recorder):
    recorder.delay_s = 30
    task_id = (await http.post("/v1/voices/train", json=body(transcript="x"))).json()["task_id"]
    for _ in range(100):
        status = (await http.get("/v1/voices/train/status", params={"task_id": task_id})).json()["status"]
        if status == "voice_conditioning":
            break
        await asyncio.sleep(0.02)
    assert status == "voice_conditioning"
    started = time.monotonic()
    r = await http.post("/v1/voices/train/cancel", params={"task_id": task_id})
    assert r.status_code == 200 and r.json()["status"] == "success"
    assert (await events(http, task_id))[-1]["stage"] == "cancelled"
    assert time.monotonic() - started < 10  # not after the slot's 30 s call
    await asyncio.sleep(0.05)
    assert recorder.cancelled and not recorder.registered
    assert_openai_error(await http.post("/v1/voices/train/cancel", params={"task_id": task_id}), 409)


async def test_one_job_at_a_time_and_status_answers_while_it_runs(http, recorder):
    recorder.delay_s = 30
    first = (await http.post("/v1/voices/train", json=body(transcript="x"))).json()["task_id"]
    assert_openai_error(
        await http.post("/v1/voices/train", json=body(voice_name="other")), 409, code="training_in_progress"
    )
    started = time.monotonic()
    r = await http.get("/v1/voices/train/status", params={"task_id": first})
    assert r.status_code == 200 and time.monotonic() - started < 10  # not after the slot's 30 s call
    await http.post("/v1/voices/train/cancel", params={"task_id": first})


async def test_a_late_client_gets_the_final_state_and_the_stream_closes(http):
    task_id = (await http.post("/v1/voices/train", json=body(transcript="x"))).json()["task_id"]
    await events(http, task_id)
    assert [e["stage"] for e in await events(http, task_id)] == ["complete"]


async def test_jobs_survive_a_restart_and_a_running_one_is_failed(http, state, recorder):
    done = (await http.post("/v1/voices/train", json=body(transcript="x", voice_name="a"))).json()["task_id"]
    await events(http, done)
    recorder.delay_s = 30
    running = (await http.post("/v1/voices/train", json=body(transcript="x", voice_name="b"))).json()["task_id"]
    restarted = VoiceTraining(state.settings.state_dir)  # what a new ingress reads from the file
    assert (await restarted.job(done)).status_body()["status"] == "complete"
    job = await restarted.job(running)
    assert job.status == "failed" and "restarted" in job.error and job.completed_at
    await http.post("/v1/voices/train/cancel", params={"task_id": running})


@pytest.mark.parametrize(
    ("request_body", "param"),
    [
        (body(audio="not base64!!"), "audio"),
        (body(audio=""), "audio"),
        (body(voice_name="bad name"), "voice_name"),
        (body(voice_name="x" * 65), "voice_name"),
        (body(quality="best"), "quality"),
        (body(denoise="maybe"), "denoise"),
        ({"voice_name": "a"}, "audio"),
    ],
)
async def test_bad_requests_are_400s_and_start_no_job(http, state, request_body, param):
    assert_openai_error(await http.post("/v1/voices/train", json=request_body), 400, param=param)
    assert not state.voice_training().store.jobs


async def test_unknown_tasks_are_404s(http):
    for method, path in [("GET", "status"), ("GET", "progress"), ("POST", "cancel")]:
        r = await http.request(method, f"/v1/voices/train/{path}", params={"task_id": "train-nope"})
        assert_openai_error(r, 404, code="task_not_found")
    assert_openai_error(await http.get("/v1/voices/train/status"), 400)  # no task_id


async def test_audio_that_cannot_be_used_fails_the_job_with_the_reason(http):
    for audio, reason in [(b"not audio at all", "cannot be decoded"), (clip(0.3), "less than 1 s")]:
        task_id = (await http.post("/v1/voices/train", json=body(audio=base64.b64encode(audio).decode()))).json()[
            "task_id"
        ]
        final = (await events(http, task_id))[-1]
        assert final["stage"] == "failed" and reason in final["error"], final


async def test_a_tts_model_that_cannot_be_trained_is_a_400(slots, http):
    slots["tts"].answers["describe"] = lambda model=None: {**fakes.tts_facts(), "model_type": "vibevoice"}
    assert_openai_error(await http.post("/v1/voices/train", json=body()), 400, code="training_unsupported")


async def test_qwen3_tts_trains_by_conditioning_unless_the_slot_says_why_not(slots, http, recorder):
    base = {**fakes.tts_facts(), "model": "qwen3-base", "model_type": "qwen3_tts", "training_unsupported": None}
    slots["tts"].answers["describe"] = lambda model=None: base
    task_id = (await http.post("/v1/voices/train", json=body(transcript="x"))).json()["task_id"]
    stages = [e["stage"] for e in await events(http, task_id)]
    assert stages[-1] == "complete" and len(recorder.conditioned) == 1  # cache_conditioning, no fit
    # A CustomVoice model (no speaker encoder): the slot's reason is the 400's, and no job starts.
    why = "a Qwen3-TTS custom_voice model has no speaker encoder to compute a voice's x-vector with"
    slots["tts"].answers["describe"] = lambda model=None: {**base, "training_unsupported": why}
    r = await http.post("/v1/voices/train", json=body(voice_name="other", transcript="x"))
    assert_openai_error(r, 400, code="training_unsupported")
    assert why in r.json()["error"]["message"] and len(recorder.conditioned) == 1


async def test_denoise_runs_the_denoiser_on_the_clip(http, recorder):
    quiet, noisy = body(transcript="x"), body(transcript="x", voice_name="noisy", denoise=True)
    for request in (quiet, noisy):  # (the denoising stage passes too quickly to be seen in events)
        assert (await events(http, (await http.post("/v1/voices/train", json=request)).json()["task_id"]))[-1][
            "stage"
        ] == "complete"
    (_, plain), (_, denoised) = recorder.conditioned
    assert len(plain) == len(denoised) and plain != denoised


# ------------------------------------------------------------------ Kokoro: style fitting


class Fitter:
    """The TTS slot's streamed `fit_voice` (Kokoro), its events each after `delay_s`."""

    def __init__(self, delay_s: float = 0.0):
        self.delay_s = delay_s
        self.calls: list[tuple] = []

    def fit_voice(self, name, samples, steps, language, base_voices=None, model=None):
        self.calls.append((name, len(samples) // 4, steps, language))
        self.base_voices = base_voices
        events = [{"scored": i, "of": 3} for i in (1, 2, 3)]
        events += [{"step": i, "loss": round(0.3 - 0.01 * i, 4), "seconds": 0.1} for i in range(steps)]
        files = {"ref_audio": f"/v/{name}.wav", "conditioning": f"/v/{name}.kokoro.safetensors"}
        result = {"nearest_voice": "am_adam", "nearest_similarity": 0.7, "start_similarity": 0.72, "similarity": 0.8}
        events.append({**result, "weights": {"am_adam": 0.9}, "files": {**files, "conditioning_model": "kokoro"}})
        return (asyncio.sleep(self.delay_s, result=e) for e in events)  # made as they are read


@pytest.fixture
def kokoro_slots(slots, recorder):
    fitter = Fitter()
    slots["tts"].answers.update(
        describe=lambda model=None: {
            **fakes.tts_facts(),
            "model": "kokoro",
            "model_type": "kokoro",
            "presets": ["af_heart", "am_adam", "bm_george"],
        },
        fit_voice=fitter.fit_voice,
    )
    slots["tts"].fitter = fitter
    return slots


async def test_kokoro_fits_a_style_reporting_each_steps_loss(kokoro_slots, http, recorder):
    kokoro_slots["tts"].fitter.delay_s = 0.05  # slow enough for the progress stream to see steps
    r = await http.post("/v1/voices/train", json=body(transcript="Hello.", quality="fast", language="en"))
    assert r.status_code == 200, r.text
    seen = await events(http, r.json()["task_id"])
    stages = [e["stage"] for e in seen]
    assert "style_fitting" in stages and "voice_conditioning" not in stages and stages[-1] == "complete"
    steps = FIT_STEPS["fast"]
    ((name, samples, n_steps, language),) = kokoro_slots["tts"].fitter.calls
    assert (name, n_steps, language) == ("narrator", steps, "en") and abs(samples - 2 * RATE) < RATE // 50
    final = seen[-1]
    assert [loss["step"] for loss in final["losses"]] == list(range(steps))
    assert final["losses"][0] == {"step": 0, "loss": 0.3} and final["fit"]["similarity"] == 0.8
    assert "0.800" in final["message"] and "am_adam" in final["message"]
    fitting = [e for e in seen if e["stage"] == "style_fitting"]
    progress = [e["stage_progress"] for e in fitting]
    assert progress == sorted(progress) and len(fitting) >= 2
    name, files, ref_text, language = recorder.registered[0]
    assert (name, files["conditioning"], ref_text) == ("narrator", "/v/narrator.kokoro.safetensors", "Hello.")
    assert not recorder.conditioned  # Kokoro has no reference encoder to call


async def test_quality_chooses_the_number_of_steps(kokoro_slots, http):
    for quality in ("high", "standard"):
        task_id = (await http.post("/v1/voices/train", json=body(transcript="x", quality=quality))).json()["task_id"]
        await events(http, task_id)
    assert [c[2] for c in kokoro_slots["tts"].fitter.calls] == [FIT_STEPS["high"], FIT_STEPS["standard"]]


async def test_steps_and_base_voices_narrow_a_fit_json_and_multipart(kokoro_slots, http):
    fitter = kokoro_slots["tts"].fitter
    r = await http.post("/v1/voices/train", json=body(transcript="x", steps=3, base_voices=["am_adam", "bm_george"]))
    assert r.status_code == 200, r.text
    assert (await events(http, r.json()["task_id"]))[-1]["stage"] == "complete"
    assert fitter.calls[-1][2] == 3 and fitter.base_voices == ["am_adam", "bm_george"]
    form = {"voice_name": "narrator2", "transcript": "x", "steps": "2", "base_voices": "af_heart, am_adam"}
    r = await http.post("/v1/voices/train", data=form, files={"audio": ("clip.wav", clip())})
    assert r.status_code == 200, r.text
    assert (await events(http, r.json()["task_id"]))[-1]["stage"] == "complete"
    assert fitter.calls[-1][2] == 2 and fitter.base_voices == ["af_heart", "am_adam"]


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"base_voices": ["am_adam", "nobody"]}, "base_voices"),
        ({"steps": 0}, "steps"),
        ({"base_voices": []}, "base_voices"),
    ],
)
async def test_bad_fit_options_are_400s_and_start_no_job(kokoro_slots, http, extra, param):
    r = await http.post("/v1/voices/train", json=body(transcript="x", **extra))
    assert_openai_error(r, 400, param)
    assert not kokoro_slots["tts"].fitter.calls


async def test_cancelling_a_fit_stops_the_slots_stream_at_once(kokoro_slots, http, recorder):
    kokoro_slots["tts"].fitter.delay_s = 0.2
    task_id = (await http.post("/v1/voices/train", json=body(transcript="x"))).json()["task_id"]
    for _ in range(200):
        job = (await http.get("/v1/voices/train/status", params={"task_id": task_id})).json()
        if job["status"] == "style_fitting" and job["progress"] > 0.7:  # scoring done, stepping
            break
        await asyncio.sleep(0.02)
    # The steps left now take 30 s each (the generator reads delay_s as it goes), so a cancel that
    # waited for the stream's next event could not come back within the bound.
    kokoro_slots["tts"].fitter.delay_s = 30
    started = time.monotonic()
    assert (await http.post("/v1/voices/train/cancel", params={"task_id": task_id})).status_code == 200
    final = (await events(http, task_id))[-1]
    assert final["stage"] == "cancelled" and final["losses"]  # the steps done so far stay visible
    assert time.monotonic() - started < 10
    await asyncio.sleep(0.05)
    assert kokoro_slots["tts"].streams[-1].cancelled and not recorder.registered


async def test_a_quiet_job_sends_keep_alives(http, state, recorder):
    recorder.delay_s = 30
    task_id = (await http.post("/v1/voices/train", json=body(transcript="x"))).json()["task_id"]
    seen = []
    async for event in state.voice_training().watch(task_id, poll_s=0.01, keepalive_s=0.05):
        seen.append(event)
        if seen.count(None) == 2:
            break
    assert seen[0]["task_id"] == task_id and seen.count(None) == 2
    await http.post("/v1/voices/train/cancel", params={"task_id": task_id})


async def test_any_ingress_replica_answers_for_a_job_another_runs(slots, recorder, tmp_path):
    """Two ingress replicas over one Control: status, progress and cancel from the replica that
    does not run the job; a second job is refused graph-wide."""
    from deployments.records import RecordStore

    recorder.delay_s = 30
    control = fakes.RecordsControl(RecordStore(tmp_path / "control.sqlite3"))
    config = GraphArgs.from_args(shipped_args(cache_dir=str(tmp_path)), environ={})
    runner, other = (
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(ingress_state(config, slots, control=control))),
            base_url="http://t",
        )
        for _ in range(2)
    )
    task_id = (await runner.post("/v1/voices/train", json=body(transcript="x"))).json()["task_id"]
    for _ in range(100):
        status = (await other.get("/v1/voices/train/status", params={"task_id": task_id})).json()["status"]
        if status == "voice_conditioning":
            break
        await asyncio.sleep(0.02)
    assert status == "voice_conditioning"
    assert_openai_error(
        await other.post("/v1/voices/train", json=body(voice_name="b")), 409, code="training_in_progress"
    )
    assert (await other.post("/v1/voices/train/cancel", params={"task_id": task_id})).status_code == 200
    assert (await events(other, task_id))[-1]["stage"] == "cancelled"
    assert (await runner.get("/v1/voices/train/status", params={"task_id": task_id})).json()["status"] == "cancelled"
