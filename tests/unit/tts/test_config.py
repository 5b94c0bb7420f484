"""The TTS slot's graph args: shipped defaults, OminiX-API's TTS environment variables,
and the shipped burst autoscaling."""

import yaml

from deployments.tts.config import TTSSlotConfig
from graphs.config import GraphArgs


def shipped():
    with open("serve_config.yaml") as f:
        return yaml.safe_load(f)["applications"][0]


def test_shipped_config_serves_kokoro_and_clones_with_the_tiny_model():
    config = GraphArgs.from_args(shipped()["args"], environ={})
    assert config.catalog()["tts"]["models"] == ["ominix-kokoro-82m", "ominix-tiny-pocket-tts"]
    assert config.tts.clone_model == "ominix-tiny-pocket-tts" and config.tts.max_models_per_replica == 2
    assert config.tts.voices_config is None and config.tts.voices_dir is None


def test_the_clone_model_is_allowed_like_the_default():
    config = TTSSlotConfig(default_model="ominix-kokoro-82m", clone_model="ominix-tiny-pocket-tts")
    assert config.allowed_models() == ["ominix-kokoro-82m", "ominix-tiny-pocket-tts"]
    assert TTSSlotConfig(default_model="ominix-kokoro-82m").allowed_models() == ["ominix-kokoro-82m"]


def test_ominix_env_overrides():
    env = {
        "TTS_MODEL": "mlx-community/Kokoro-82M-bf16",
        "VOICES_CONFIG": "~/.OminiX/models/voices.json",
        "TTS_VOICES_DIR": "/srv/voices",
    }
    config = GraphArgs.from_args(shipped()["args"], environ=env)
    assert config.catalog()["tts"]["models"] == ["mlx-community/Kokoro-82M-bf16", "ominix-tiny-pocket-tts"]
    assert config.tts.voices_config == "~/.OminiX/models/voices.json"
    assert config.tts.voices_dir == "/srv/voices"


def test_ominix_model_dir_variable():
    config = GraphArgs.from_args({}, environ={"QWEN3_TTS_MODEL_DIR": "/models/qwen3-tts"})
    assert config.tts.default_model == "/models/qwen3-tts"
    both = {"QWEN3_TTS_MODEL_DIR": "/models/qwen3-tts", "TTS_MODEL": "/models/kokoro"}
    assert GraphArgs.from_args({}, environ=both).tts.default_model == "/models/kokoro"


def test_disabled_tts_is_not_in_the_catalog():
    assert "tts" not in GraphArgs.from_args({"tts": {"enabled": False}}, environ={}).catalog()


def test_shipped_tts_autoscaling_is_tuned_for_bursts():
    tts = next(d for d in shipped()["deployments"] if d["name"] == "TTS")
    scaling = tts["autoscaling_config"]
    assert scaling["min_replicas"] == 1 and scaling["max_replicas"] > 1
    assert scaling["target_ongoing_requests"] <= 2
    assert scaling["upscale_delay_s"] < scaling["downscale_delay_s"]
