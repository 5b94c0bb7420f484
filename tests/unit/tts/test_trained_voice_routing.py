"""Which engine speaks a trained voice (TTSSlot._job, without Ray): a voice fitted for Kokoro is
spoken by Kokoro from its pack, even where the slot sends recordings to its clone model; a voice
trained for another model goes to that path as any recording does, with its transcript."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from deployments.protocol.speech import SynthesisParams
from deployments.tts.config import TTSSlotConfig
from deployments.tts.deployment import TTSSlot
from deployments.tts.engine import Capabilities
from deployments.voices.library import VoiceLibrary
from deployments.voices.registry import VoiceEntry


def engine(model_id: str, clone: bool):
    return SimpleNamespace(
        model_id=model_id,
        sample_rate=24000,
        presets=["af_heart"] if not clone else ["alba"],
        default_preset=None,
        preset_aliases={},
        capabilities=Capabilities(clone=clone),
        check_job=lambda job: None,
    )


@pytest.fixture
def slot(tmp_path):
    slot = object.__new__(TTSSlot.func_or_class)
    slot.config = TTSSlotConfig(default_model="kokoro", clone_model="pocket")
    slot.library = VoiceLibrary(tmp_path / "voices.json")
    cloner = engine("pocket", clone=True)

    async def use(model_id):  # ReplicaModels.use: the clone model, leased for the request
        assert model_id == "pocket"
        return cloner

    slot.models = SimpleNamespace(use=use)
    (tmp_path / "a.wav").write_bytes(b"")
    for name, model in (("fitted", "kokoro"), ("conditioned", "pocket")):
        pack = tmp_path / f"{name}.safetensors"
        pack.write_bytes(b"")
        entry = VoiceEntry(
            ref_audio=str(tmp_path / "a.wav"), ref_text=f"{name} says", conditioning=str(pack), conditioning_model=model
        )
        slot.library.registry.register(name, entry)
    return slot


async def test_a_voice_fitted_for_kokoro_is_spoken_by_kokoro_from_its_pack(slot, monkeypatch):
    import ray.serve

    monkeypatch.setattr(ray.serve, "get_multiplexed_model_id", lambda: "")
    kokoro = engine("kokoro", clone=False)
    chosen, job = await slot._job(kokoro, SynthesisParams(text="Hi.", voice="fitted"))
    assert chosen is kokoro and job.conditioning.name == "fitted.safetensors" and job.ref_audio is None
    chosen, job = await slot._job(kokoro, SynthesisParams(text="Hi.", voice="conditioned"))
    assert chosen.model_id == "pocket" and job.conditioning.name == "conditioned.safetensors"
    # the transcript goes with the cached conditioning: Qwen3-TTS Base speaks it in context, as with the clip
    assert job.ref_text == "conditioned says" and job.ref_audio is None
