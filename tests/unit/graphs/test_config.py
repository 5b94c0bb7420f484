"""Graph args: validation, OminiX environment overrides, the ingress catalog."""

import pytest
import yaml
from pydantic import ValidationError

from deployments.env import ConfigError
from deployments.ingress.catalog import ModelCatalog
from deployments.protocol.errors import APIError
from graphs.config import GraphArgs


def shipped_args():
    with open("serve_config.yaml") as f:
        return yaml.safe_load(f)["applications"][0]["args"]


def test_shipped_config_validates_and_serves_the_real_small_models():
    config = GraphArgs.from_args(shipped_args(), environ={})
    assert config.llm.default_model == "ominix-smollm2-135m-instruct"
    assert config.catalog()["llm"] == {
        "models": ["ominix-smollm2-135m-instruct", "ominix-tiny-qwen3"],
        "models_dir": None,
        "aliases": {"qwen3": "default", "mistral": "default", "glm": "default"},  # OminiX-API's names
        "families": {},
        # the ingress refuses n over llm.max_n before the slot, and resamples a structured answer
        # that fails its schema up to llm.schema_attempts times
        "options": {"max_n": 8, "schema_attempts": 4},
        "adapters": {},  # LoRA adapters declared in llm.adapters -> the model each runs on
    }
    assert config.catalog()["asr"]["models"] == ["whisper-tiny.en", "ominix-tiny-whisper"]
    assert config.catalog()["tts"]["models"] == ["ominix-kokoro-82m", "ominix-tiny-pocket-tts"]
    # Every enabled slot starts under the control plane with its configured default.
    assert config.defaults() == {
        "llm": "ominix-smollm2-135m-instruct",
        "asr": "whisper-tiny.en",
        "tts": "ominix-kokoro-82m",
        "image": "ominix-tiny-flux2-klein",
        "embeddings": "ominix-all-minilm-l6-v2",
        "vlm": "ominix-tiny-qwen2-vl",
    }


def test_llm_model_env_overrides_the_default():
    config = GraphArgs.from_args(shipped_args(), environ={"LLM_MODEL": "mlx-community/Qwen3-0.6B-4bit"})
    assert config.llm.default_model == "mlx-community/Qwen3-0.6B-4bit"
    assert config.defaults()["llm"] == "mlx-community/Qwen3-0.6B-4bit"


def test_a_set_but_blank_variable_is_an_error_naming_it():
    # One rule for every variable (deployments/env.py): blank never falls back silently.
    with pytest.raises(ConfigError, match="LLM_MODEL must not be empty when present"):
        GraphArgs.from_args({}, environ={"LLM_MODEL": "  "})


def test_env_errors_name_the_variable_and_never_echo_its_value():
    with pytest.raises(ConfigError, match="OMINIX_MAX_CONNS must be an integer"):
        GraphArgs.from_args({}, environ={"OMINIX_MAX_CONNS": "many"})
    with pytest.raises(ConfigError, match="OMINIX_MAX_CONNS: Input should be greater than or equal to 1"):
        GraphArgs.from_args({}, environ={"OMINIX_MAX_CONNS": "0"})
    with pytest.raises(ConfigError, match="OMINIX_ALLOW_UNAUTHENTICATED_NETWORK_ACCESS must be one of"):
        GraphArgs.from_args({}, environ={"OMINIX_ALLOW_UNAUTHENTICATED_NETWORK_ACCESS": "maybe"})


def test_a_list_variable_replaces_the_configured_list():
    args = {"security": {"api_keys": ["from-args"], "cors_origins": ["https://a.example"]}}
    config = GraphArgs.from_args(
        args, environ={"OMINIX_API_KEY": "env-1, env-2", "OMINIX_CORS_ORIGINS": "https://b.example"}
    )
    assert config.security.api_keys == ["env-1", "env-2"]
    assert config.security.cors_origins == ["https://b.example"]
    assert GraphArgs.from_args(args, environ={}).security.api_keys == ["from-args"]


def test_typos_in_args_are_rejected():
    with pytest.raises(ValidationError):
        GraphArgs.from_args({"llm": {"default_modle": "x"}}, environ={})


def test_disabled_slot_is_neither_in_the_catalog_nor_under_control():
    config = GraphArgs.from_args({"asr": {"enabled": False}}, environ={"TTS_MODEL": "my/tts"})
    assert set(config.defaults()) == {"llm", "tts", "image", "embeddings", "vlm"}
    assert config.defaults()["tts"] == "my/tts"


def test_disabled_slot_is_not_in_the_catalog():
    assert "llm" not in GraphArgs.from_args({"llm": {"enabled": False}}, environ={}).catalog()


def test_catalog_routes_by_exact_id(tmp_path):
    (tmp_path / "local-model").mkdir()
    catalog = ModelCatalog.from_config({"llm": {"models": ["a", "b"], "models_dir": str(tmp_path)}})
    assert catalog.resolve("llm", None) is None  # the slot's current default
    assert catalog.resolve("llm", "b") == "b"
    assert catalog.resolve("llm", str(tmp_path / "local-model")) == str(tmp_path / "local-model")
    assert catalog.resolve("llm", "local-model") == "local-model"
    with pytest.raises(APIError) as info:
        catalog.resolve("llm", "B")
    assert info.value.status_code == 404 and info.value.code == "model_not_found"
    assert [c.id for c in catalog.cards()] == ["a", "b"]


def test_api_keys_from_env_reach_the_ingress_only_as_digests():
    config = GraphArgs.from_args({}, environ={"OMINIX_API_KEY": "alpha, beta"})
    settings = config.ingress_settings("127.0.0.1")
    assert settings.auth_required
    assert "alpha" not in settings.model_dump_json() and "beta" not in settings.model_dump_json()
    assert settings.key_is_valid("alpha") and settings.key_is_valid("beta")
    assert not settings.key_is_valid("gamma")
    assert settings.cors_origins == []  # keys configured: no wildcard CORS


def test_keyless_loopback_gets_wildcard_cors():
    assert GraphArgs.from_args({}, environ={}).ingress_settings("127.0.0.1").cors_origins == ["*"]


def test_keyless_network_bind_is_refused_unless_explicitly_allowed():
    from graphs.config import InsecureBind

    with pytest.raises(InsecureBind, match="OMINIX_API_KEY"):
        GraphArgs.from_args({}, environ={}).ingress_settings("0.0.0.0")
    allowed = GraphArgs.from_args({}, environ={"OMINIX_ALLOW_UNAUTHENTICATED_NETWORK_ACCESS": "1"})
    settings = allowed.ingress_settings("0.0.0.0")
    assert not settings.auth_required and settings.cors_origins == []
    keyed = GraphArgs.from_args({}, environ={"OMINIX_API_KEY": "k"})
    assert keyed.ingress_settings("0.0.0.0").auth_required


def test_connection_cap_from_env():
    assert (
        GraphArgs.from_args({}, environ={"OMINIX_MAX_CONNS": "5"}).ingress_settings(None).max_concurrent_requests == 5
    )


def test_ominix_env_names_patch_http_options():
    from graphs.serve import apply_env

    config = {"http_options": {"host": "127.0.0.1", "port": 8080}, "applications": []}
    patched = apply_env(config, {"PORT": "9000", "OMINIX_TLS_CERT": "/c.pem", "OMINIX_TLS_KEY": "/k.pem"})
    assert patched["http_options"] == {
        "host": "127.0.0.1",
        "port": 9000,
        "ssl_certfile": "/c.pem",
        "ssl_keyfile": "/k.pem",
    }
    assert config["http_options"]["port"] == 8080  # the file's config is not modified
    with pytest.raises(SystemExit):
        apply_env(config, {"OMINIX_TLS_CERT": "/c.pem"})
    with pytest.raises(SystemExit, match="PORT must be an integer"):
        apply_env(config, {"PORT": "eighty"})


def test_make_serve_starts_ray_without_niced_replicas_unless_told_otherwise():
    from graphs.serve import ray_env

    assert ray_env({"PATH": "/bin"}) == {"PATH": "/bin", "RAY_worker_niceness": "0", "RAY_AUTH_MODE": "token"}
    assert ray_env({"RAY_worker_niceness": "10"})["RAY_worker_niceness"] == "10"


def test_make_serve_keeps_token_authentication_on_unless_told_otherwise():
    from graphs.serve import ray_env

    assert ray_env({})["RAY_AUTH_MODE"] == "token"
    assert ray_env({"RAY_AUTH_MODE": "disabled"})["RAY_AUTH_MODE"] == "disabled"


def test_miniinfers_diarization_threshold_variable():
    config = GraphArgs.from_args(shipped_args(), environ={"MINI_DIAR_THRESHOLD": "0.3"})
    assert config.asr.diarization_threshold == 0.3
    assert config.asr.diarization_config().threshold == 0.3
    assert GraphArgs.from_args(shipped_args(), environ={}).asr.diarization_threshold == 0.28
    with pytest.raises(ConfigError, match="MINI_DIAR_THRESHOLD"):
        GraphArgs.from_args({}, environ={"MINI_DIAR_THRESHOLD": "high"})
    with pytest.raises(ConfigError, match="MINI_DIAR_THRESHOLD"):
        GraphArgs.from_args({}, environ={"MINI_DIAR_THRESHOLD": "0"})


def test_controls_per_call_access_log_is_off_and_other_deployments_keep_serves_logging():
    config = GraphArgs.from_args(shipped_args(), environ={})
    assert config.serve_options("Control") == {"logging_config": {"enable_access_log": False}}
    # Nothing set for the others: serve_config.yaml's application logging_config still reaches them.
    assert config.serve_options("LLM") == {} and config.serve_options("Ingress") == {}


def test_log_level_debug_brings_controls_access_log_back_and_reaches_every_deployment():
    config = GraphArgs.from_args(shipped_args(), environ={"LOG_LEVEL": "debug"})
    assert config.serve_options("Control") == {"logging_config": {"log_level": "DEBUG", "enable_access_log": True}}
    assert config.serve_options("ASR") == {"logging_config": {"log_level": "DEBUG"}}


def test_the_access_log_setting_wins_over_the_level():
    args = {**shipped_args(), "logging": {"level": "DEBUG", "control_access_log": False}}
    config = GraphArgs.from_args(args, environ={})
    assert config.serve_options("Control")["logging_config"]["enable_access_log"] is False
    quiet = GraphArgs.from_args({**shipped_args(), "logging": {"control_access_log": True}}, environ={})
    assert quiet.serve_options("Control") == {"logging_config": {"enable_access_log": True}}


def test_an_unknown_log_level_is_an_error_naming_the_variable():
    with pytest.raises(ConfigError, match="LOG_LEVEL"):
        GraphArgs.from_args(shipped_args(), environ={"LOG_LEVEL": "chatty"})
