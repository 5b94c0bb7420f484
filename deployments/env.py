"""Environment variables: one table (OminiX-API's names and ours -> the setting each one sets),
one parsing rule, one error style.

The rule, for every variable: a variable that is set wins over the setting in
serve_config.yaml; its value is trimmed; set but blank is an error (unset it instead), as
OminiX-API does for its OMINIX_V0_* variables, so a half-written env file never silently
falls back to another setting; a list is comma-separated and replaces the configured list; a
flag is 1/true/yes/on or 0/false/no/off. Errors are `ConfigError("<VAR> ...")`, naming the
variable. Targets under `http_options.` are Ray Serve's HTTP options (graphs/serve.py applies
them before Ray starts); the others are paths into the graph args (graphs/config.py).

docs/configuration.md lists this table next to every arg (generated: `python -m graphs.docs`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Optional

Kind = Literal["text", "int", "flag", "list", "path"]
HTTP_OPTIONS = "http_options."
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


class ConfigError(ValueError):
    """A setting is wrong: start-up stops with a message that names it."""


@dataclass(frozen=True)
class EnvVar:
    name: str
    target: str  # dotted path in the graph args, or http_options.<option>
    meaning: str
    kind: Kind = "text"


ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar("PORT", "http_options.port", "HTTP port", "int"),
    EnvVar("OMINIX_API_HOST", "http_options.host", "Address the HTTP proxy binds"),
    EnvVar("OMINIX_TLS_CERT", "http_options.ssl_certfile", "TLS certificate (with OMINIX_TLS_KEY: HTTPS)", "path"),
    EnvVar("OMINIX_TLS_KEY", "http_options.ssl_keyfile", "TLS private key (with OMINIX_TLS_CERT)", "path"),
    EnvVar("OMINIX_CACHE_DIR", "cache_dir", "Where built-in models are generated and converted", "path"),
    EnvVar("OMINIX_APP_MANIFEST", "manifest", "App manifest (ominix.toml) checked at start-up", "path"),
    EnvVar("OMINIX_API_KEY", "security.api_keys", "API keys (comma-separated); keeps them out of Ray's logs", "list"),
    EnvVar("OMINIX_CORS_ORIGINS", "security.cors_origins", "Browser origins allowed (comma-separated)", "list"),
    EnvVar("OMINIX_MAX_CONNS", "security.max_concurrent_requests", "Requests in flight per ingress replica", "int"),
    EnvVar(
        "OMINIX_ALLOW_UNAUTHENTICATED_NETWORK_ACCESS",
        "security.allow_unauthenticated_network_access",
        "Serve on a non-loopback address without API keys",
        "flag",
    ),
    EnvVar("LOG_LEVEL", "logging.level", "Log level of every deployment: DEBUG, INFO, WARNING, ERROR"),
    EnvVar("LLM_MODEL", "llm.default_model", "The LLM slot's default model"),
    EnvVar("ASR_MODEL_DIR", "asr.default_model", "The ASR slot's default model"),
    EnvVar("ASR_MODE", "asr.mode", "ASR batching mode: off | interactive | conversational | offline"),
    EnvVar("ASR_MAX_BATCH", "asr.max_batch", "ASR batch size (overrides the mode's)", "int"),
    EnvVar("MINI_DIAR_THRESHOLD", "asr.diarization_threshold", "Diarization clustering threshold (MiniInfer's name)"),
    EnvVar("TTS_MODEL", "tts.default_model", "The TTS slot's default model"),
    EnvVar("QWEN3_TTS_MODEL_DIR", "tts.default_model", "OminiX-API's name for TTS_MODEL (TTS_MODEL wins)"),
    EnvVar("VOICES_CONFIG", "tts.voices_config", "The voice registry file (OminiX voices.json)", "path"),
    EnvVar("TTS_VOICES_DIR", "tts.voices_dir", "Audio files requests may name as voices", "path"),
    EnvVar("TTS_REF_AUDIO", "tts.ref_audio", "Reference recording: the default voice of every TTS replica", "path"),
    EnvVar("IMAGE_MODEL", "image.default_model", "The image slot's default model (or `flux`, `zimage`)"),
    EnvVar("EMBEDDINGS_MODEL", "embeddings.default_model", "The embeddings slot's default model"),
    EnvVar("VLM_MODEL", "vlm.default_model", "The VLM slot's default model (OminiX-API's name)"),
    EnvVar("OMINIX_V0_SCHEDULER_URL", "cuda.scheduler_url", "CUDA route: the worker-v0 shim's base URL"),
    EnvVar("OMINIX_V0_SCHEDULER_TOKEN", "cuda.scheduler_token", "CUDA route: bearer token for the shim"),
    EnvVar(
        "OMINIX_V0_SCHEDULER_MODELS", "cuda.scheduler_models", "CUDA route: exact public model ids (comma-separated)"
    ),
    EnvVar("OMINIX_V0_SERVED_MODEL", "cuda.served_model", "CUDA route: the model id the worker must report"),
    EnvVar("OMINIX_V0_SCHEDULER_TIMEOUT_SECS", "cuda.scheduler_timeout_secs", "CUDA route: whole-request timeout"),
    EnvVar(
        "OMINIX_V0_CHAT_TEMPLATE_KWARGS_JSON", "cuda.chat_template_kwargs", "CUDA route: chat template kwargs (JSON)"
    ),
)


def clean_text(name: str, raw: str, error: type[ConfigError] = ConfigError, hint: str = "") -> str:
    """A setting's text, trimmed; not valid UTF-8 or blank is an `error` naming the setting."""
    try:
        raw.encode("utf-8")  # os.environ keeps undecodable bytes as lone surrogates
    except UnicodeEncodeError:
        raise error(f"{name} must be valid UTF-8") from None
    value = raw.strip()
    if not value:
        raise error(f"{name} must not be empty when present{hint}")
    return value


def parse(var: EnvVar, raw: str) -> Any:
    """The value of a set variable, by its kind (the rule in the module docstring)."""
    value = clean_text(var.name, raw, hint=" (unset it to use the configured value)")
    if var.kind == "int":
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"{var.name} must be an integer, got {value!r}") from None
    if var.kind == "flag":
        if value.lower() not in _TRUE | _FALSE:
            raise ConfigError(f"{var.name} must be one of 1/true/yes/on or 0/false/no/off, got {value!r}")
        return value.lower() in _TRUE
    if var.kind == "list":
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


def overrides(environ: Mapping[str, str], http: bool = False) -> dict[str, tuple[EnvVar, Any]]:
    """target -> (the variable, its parsed value), for the set variables of one scope: the graph
    args, or with `http` Serve's HTTP options. Where two variables set one target, the first
    in the table wins."""
    out: dict[str, tuple[EnvVar, Any]] = {}
    for var in ENV_VARS:
        if var.target.startswith(HTTP_OPTIONS) != http or var.name not in environ:
            continue
        value = parse(var, environ[var.name])
        out.setdefault(var.target.removeprefix(HTTP_OPTIONS) if http else var.target, (var, value))
    return out


def apply(values: Mapping[str, Any], targets: Mapping[str, tuple[EnvVar, Any]]) -> dict[str, Any]:
    """A deep copy of `values` with each dotted target set."""
    result = copy.deepcopy(dict(values))
    for target, (_, value) in targets.items():
        node = result
        *parents, leaf = target.split(".")
        for key in parents:
            child = node.get(key)
            node[key] = child = dict(child) if isinstance(child, Mapping) else {}
            node = child
        node[leaf] = value
    return result


def variable_for(loc: tuple, targets: Mapping[str, tuple[EnvVar, Any]]) -> Optional[EnvVar]:
    """The variable that set the value a validation error points at (its `loc`), if one did."""
    path = ".".join(str(part) for part in loc)
    for target, (var, _) in targets.items():
        if path == target or path.startswith(target + "."):
            return var
    return None
