"""Model management in process (ServingModels over a fake Control): status, readiness, the
model list, and a load that fails on one replica puts the previous model back."""

from __future__ import annotations

import httpx

from deployments.control.state import LOADED, Desired, ReplicaReport
from deployments.ingress.app import create_app
from graphs.config import GraphArgs
from tests.ingress import fakes
from tests.ingress.conftest import default_slots, ingress_state, shipped_args


class FakeControl(fakes.FakeClient):
    """Control's calls over a dict of desired states and scripted replica reports."""

    def __init__(self, defaults: dict[str, str], fail_model: str | None = None, system: dict | None = None):
        self.desired = {slot: Desired(slot=slot, model=model) for slot, model in defaults.items()}
        self.fail_model = fail_model
        self.system = system or {}  # slot -> the `blas` and `warnings` its replicas report
        super().__init__(status=self._status, set_desired=self._set, wait_applied=self._applied)

    def _report(self, slot: str, index: int, model: str | None, error: str | None = None) -> ReplicaReport:
        return ReplicaReport(
            slot=slot,
            replica_id=f"{slot}-{index}",
            epoch=self.desired[slot].epoch,
            default_model=model,
            loaded_models=[model] if model else [],
            error=error,
            **self.system.get(slot, {}),
        )

    def _status(self, model=None) -> dict:
        return {
            slot: {"desired": d.model_dump(), "replicas": [self._report(slot, 0, d.model).model_dump()]}
            for slot, d in self.desired.items()
        }

    def _set(self, slot, state, desired_model, model=None) -> Desired:
        current = self.desired[slot]
        self.desired[slot] = Desired(slot=slot, state=state, model=desired_model, epoch=current.epoch + 1)
        return self.desired[slot]

    def _applied(self, slot, epoch, timeout_s, model=None) -> list[ReplicaReport]:
        model = self.desired[slot].model
        if model == self.fail_model:  # the second replica cannot load it
            return [self._report(slot, 0, model), self._report(slot, 1, "previous", f"Loading '{model}' failed")]
        return [self._report(slot, 0, model), self._report(slot, 1, model)]


def _client(control: FakeControl, **args):
    import httpx

    config = GraphArgs.from_args(shipped_args(**args), environ={})
    app = create_app(ingress_state(config, default_slots(), control=control))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


DEFAULTS = {
    "llm": "ominix-tiny-qwen3",
    "asr": "whisper-tiny.en",
    "tts": "ominix-tiny-pocket-tts",
    "image": "ominix-tiny-flux2-klein",
    "embeddings": "ominix-all-minilm-l6-v2",
    "vlm": "ominix-tiny-qwen2-vl",
}


async def test_status_and_readiness_come_from_the_control_plane(tmp_path):
    async with _client(FakeControl(DEFAULTS), cache_dir=str(tmp_path)) as http:
        status = (await http.get("/v1/models/status")).json()
        assert status["models"] == DEFAULTS and status["slots"]["llm"]["state"] == LOADED
        assert status["slots"]["tts"]["replicas"][0]["replica_id"] == "tts-0"
        ready = await http.get("/readyz")
        assert ready.status_code == 200 and ready.json()["slots"]["asr"] == {
            "ready": True,
            "model": "whisper-tiny.en",
            "replicas": 1,
            "mlx": [],
            "blas": [],
            "warnings": [],
        }
        ids = [card["id"] for card in (await http.get("/v1/models")).json()["data"]]
        assert "ominix-tiny-qwen3" in ids and "whisper-tiny.en" in ids


async def test_a_load_that_fails_on_a_replica_keeps_the_previous_model(tmp_path):
    control = FakeControl(DEFAULTS, fail_model="ominix-tiny-whisper")
    async with _client(control, cache_dir=str(tmp_path)) as http:
        r = await http.post("/v1/models/load", json={"model": "ominix-tiny-whisper", "model_type": "asr"})
        assert r.status_code == 500 and "asr-1" in r.json()["error"]["message"]
        assert control.desired["asr"].model == "whisper-tiny.en"  # put back
        ok = await http.post("/v1/models/load", json={"model_id": "ominix-tiny-qwen3", "model_type": "llm"})
        assert (
            ok.status_code == 200 and [v["default_model"] for v in ok.json()["replicas"]] == ["ominix-tiny-qwen3"] * 2
        )


async def test_loads_are_checked_before_the_control_plane_is_asked(tmp_path):
    control = FakeControl(DEFAULTS)
    async with _client(control, cache_dir=str(tmp_path)) as http:
        unknown_slot = await http.post("/v1/models/load", json={"model": "x", "model_type": "video"})
        not_allowed = await http.post("/v1/models/load", json={"model": "org/other", "model_type": "llm"})
        traversal = await http.post("/v1/models/load", json={"model": "../../etc", "model_type": "llm"})
    assert unknown_slot.status_code == 400 and unknown_slot.json()["error"]["param"] == "model_type"
    assert not_allowed.status_code == 403 and traversal.status_code == 400
    assert not [call for call in control.calls if call[0] == "set_desired"]


async def test_unload_all_reports_each_slot(tmp_path):
    async with _client(FakeControl(DEFAULTS), cache_dir=str(tmp_path)) as http:
        r = await http.post("/v1/models/unload", json={"model_type": "all"})
    assert r.status_code == 200 and set(r.json()["unloaded"]) == set(DEFAULTS)


async def test_version_lists_the_engines_of_enabled_slots(tmp_path):
    async with _client(FakeControl(DEFAULTS), cache_dir=str(tmp_path), image={"enabled": False}) as http:
        body = (await http.get("/v1/version")).json()
    categories = {engine["category"] for engine in body["capabilities"].values()}
    assert (
        categories == {"llm", "asr", "tts", "embeddings", "vlm"}
        and {"model": "whisper-tiny.en", "model_type": "asr"} in body["models_loaded"]
    )


REFERENCE_BLAS = {"library": "reference", "kind": "reference", "reason": "no OpenBLAS or MKL found"}
OPENBLAS = {"library": "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0", "kind": "openblas", "threads": 1}
CPU = {
    "backend": "cpu",
    "device": "cpu",
    "device_name": "AMD EPYC",
    "cuda": False,
    "metal": False,
    "build": "mlx-cpu 0.32.4",
}
H200 = {
    **CPU,
    "backend": "cuda",
    "device": "gpu",
    "device_name": "NVIDIA H200",
    "cuda": True,
    "build": "mlx-cuda-13 0.32.4",
}
SLOW = "MLX's CPU matrix products use the reference BLAS ...: about 30x slower. Fix: `make setup`"
NO_FFMPEG = "system packages: ffmpeg is missing: ... Install it: `sudo apt-get install ffmpeg`"


async def test_each_slots_backend_blas_and_what_its_replicas_lack_show_in_readyz_and_version(tmp_path):
    control = FakeControl(
        DEFAULTS,
        system={
            "asr": {"blas": REFERENCE_BLAS, "accelerator": CPU, "warnings": [SLOW, NO_FFMPEG]},
            "llm": {"blas": OPENBLAS, "accelerator": H200},
        },
    )
    async with _client(control, cache_dir=str(tmp_path)) as http:
        ready = (await http.get("/readyz")).json()
        version = (await http.get("/v1/version")).json()
        status = (await http.get("/v1/models/status")).json()
    assert ready["slots"]["asr"]["blas"] == ["reference"] and ready["slots"]["asr"]["warnings"] == [SLOW, NO_FFMPEG]
    assert ready["slots"]["llm"]["blas"] == ["openblas"] and ready["slots"]["llm"]["warnings"] == []
    assert ready["slots"]["llm"]["mlx"] == ["cuda (NVIDIA H200)"] and ready["slots"]["asr"]["mlx"] == ["cpu (AMD EPYC)"]
    assert ready["ingress"] == {"warnings": []}  # the in-process ingress checks nothing at start
    assert version["system"]["asr"] == {"blas": [REFERENCE_BLAS], "accelerators": [CPU], "warnings": [SLOW, NO_FFMPEG]}
    assert version["system"]["llm"]["blas"] == [OPENBLAS] and version["system"]["ingress"] == {"warnings": []}
    assert version["system"]["llm"]["accelerators"] == [H200]
    assert status["slots"]["llm"]["replicas"][0]["accelerator"] == H200  # per replica


def test_replicas_that_agree_are_told_once():
    from deployments.ingress.serving.models import system_summary

    same = {"blas": OPENBLAS, "accelerator": H200, "warnings": [NO_FFMPEG]}
    mac = {**same, "accelerator": {**H200, "backend": "metal", "device_name": "Apple M3 Max"}}
    assert system_summary([same, dict(same), {"blas": None}]) == {
        "blas": [OPENBLAS],
        "accelerators": [H200],
        "warnings": [NO_FFMPEG],
    }
    assert system_summary([same, mac])["accelerators"] == [H200, mac["accelerator"]]


async def test_clearing_the_prompt_cache_asks_an_llm_replica_and_returns_its_answer(http, slots):
    removed = {"replica": "llm-0", "entries": 3, "bytes": 4096}
    slots["llm"].answers["clear_prompt_cache"] = lambda model=None: removed
    r = await http.post("/v1/models/cache/clear")
    assert r.status_code == 200 and r.json() == removed
    assert slots["llm"].calls == [("clear_prompt_cache", (), None)]


async def test_clearing_the_prompt_cache_without_an_llm_slot_is_slot_disabled(tmp_path):
    slots = {name: client for name, client in default_slots().items() if name != "llm"}
    config = GraphArgs.from_args(shipped_args(cache_dir=str(tmp_path), llm={"enabled": False}), environ={})
    app = create_app(ingress_state(config, slots))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        r = await http.post("/v1/models/cache/clear")
    assert r.status_code == 404 and "llm.enabled is false" in r.json()["error"]["message"]
