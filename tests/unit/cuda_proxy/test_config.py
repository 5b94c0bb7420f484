"""The CUDA route's configuration (OminiX-API's OMINIX_V0_* rules): every rule fails start-up
naming its variable."""

import pytest

from deployments.cuda_proxy.config import CudaConfigError, parse_route
from deployments.env import ConfigError
from graphs.config import GraphArgs

GOOD = {
    "OMINIX_V0_SCHEDULER_URL": "https://cuda.example.com",
    "OMINIX_V0_SCHEDULER_TOKEN": "secret",
    "OMINIX_V0_SCHEDULER_MODELS": "qwen3-8b-cuda",
    "OMINIX_V0_SERVED_MODEL": "Qwen/Qwen3-8B",
}


def route(**changes):
    env = {**GOOD, **changes}
    return GraphArgs.from_args({}, environ={k: v for k, v in env.items() if v is not None}).cuda_route()


def rejects(message, **changes):
    with pytest.raises(ConfigError) as info:  # CudaConfigError, or the env table's rule
        route(**changes)
    assert str(info.value) == message or message in str(info.value), str(info.value)
    return str(info.value)


def test_no_variable_means_no_route():
    assert GraphArgs.from_args({}, environ={}).cuda_route() is None
    assert parse_route({var: None for var in GOOD}) is None


def test_full_route_with_defaults():
    r = route()
    assert r.base_url == "https://cuda.example.com"
    assert r.models == ("qwen3-8b-cuda",) and r.served_model == "Qwen/Qwen3-8B"
    assert r.timeout_s == 1800 and r.chat_template_kwargs == {}
    assert "secret" not in repr(r)  # the token never reaches a log line through repr


@pytest.mark.parametrize("missing", list(GOOD))
def test_all_or_nothing_for_the_required_four(missing):
    message = rejects(f"{missing} is required", **{missing: None})
    assert message.startswith(missing)


def test_any_optional_variable_alone_requires_the_four():
    with pytest.raises(CudaConfigError, match="OMINIX_V0_SCHEDULER_URL is required"):
        GraphArgs.from_args({}, environ={"OMINIX_V0_SCHEDULER_TIMEOUT_SECS": "30"}).cuda_route()


@pytest.mark.parametrize(
    "var", list(GOOD) + ["OMINIX_V0_SCHEDULER_TIMEOUT_SECS", "OMINIX_V0_CHAT_TEMPLATE_KWARGS_JSON"]
)
def test_present_but_blank_is_an_error(var):
    rejects(f"{var} must not be empty when present", **{var: "   "})


def test_values_are_trimmed_and_models_split_exactly():
    r = route(OMINIX_V0_SCHEDULER_MODELS=" a , b,, a,Qwen/Qwen3-8B ", OMINIX_V0_SERVED_MODEL=" s ")
    assert r.models == ("a", "b", "Qwen/Qwen3-8B") and r.served_model == "s"


def test_models_need_one_exact_id_and_no_wildcards():
    rejects("OMINIX_V0_SCHEDULER_MODELS must contain at least one exact model id", OMINIX_V0_SCHEDULER_MODELS=" , ,")
    rejects(
        "OMINIX_V0_SCHEDULER_MODELS does not accept wildcards; list exact model ids",
        OMINIX_V0_SCHEDULER_MODELS="a,qwen*",
    )
    rejects("does not accept wildcards", OMINIX_V0_SCHEDULER_MODELS="*")


def test_served_model_is_one_id():
    rejects("OMINIX_V0_SERVED_MODEL must contain one exact served model id", OMINIX_V0_SERVED_MODEL="a,b")


@pytest.mark.parametrize("value", ["abc", "1.5", "-3", "12s"])
def test_timeout_must_be_an_integer(value):
    rejects("OMINIX_V0_SCHEDULER_TIMEOUT_SECS must be a positive integer", OMINIX_V0_SCHEDULER_TIMEOUT_SECS=value)


@pytest.mark.parametrize("value", ["0", "86401"])
def test_timeout_range(value):
    rejects(
        "OMINIX_V0_SCHEDULER_TIMEOUT_SECS must be between 1 and 86400 seconds",
        OMINIX_V0_SCHEDULER_TIMEOUT_SECS=value,
    )


def test_timeout_bounds_are_inclusive():
    assert route(OMINIX_V0_SCHEDULER_TIMEOUT_SECS="1").timeout_s == 1
    assert route(OMINIX_V0_SCHEDULER_TIMEOUT_SECS="86400").timeout_s == 86400


@pytest.mark.parametrize("value", ["[1]", "true", "{bad", '"x"'])
def test_kwargs_must_be_a_json_object(value):
    rejects("OMINIX_V0_CHAT_TEMPLATE_KWARGS_JSON must be a JSON object: ", OMINIX_V0_CHAT_TEMPLATE_KWARGS_JSON=value)


def test_kwargs_are_parsed():
    r = route(OMINIX_V0_CHAT_TEMPLATE_KWARGS_JSON='{"enable_thinking": false}')
    assert r.chat_template_kwargs == {"enable_thinking": False}


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:30000", "http://localhost:8000/", "http://[::1]:8000", "https://gpu.example.com:8443"],
)
def test_allowed_urls(url):
    assert route(OMINIX_V0_SCHEDULER_URL=url).base_url == url.rstrip("/")


@pytest.mark.parametrize(
    "url, message",
    [
        ("http://gpu.example.com", "may use plaintext HTTP only on loopback; use HTTPS for a remote worker"),
        ("http://10.0.0.5:8000", "may use plaintext HTTP only on loopback"),
        ("ftp://127.0.0.1", "must use http or https"),
        ("127.0.0.1:8000", "must use http or https"),
        ("https://user:pw@gpu.example.com", "must not embed credentials"),
        ("https://token@gpu.example.com", "must not embed credentials"),
        ("https://gpu.example.com/?x=1", "must not have a query or fragment"),
        ("https://gpu.example.com/#frag", "must not have a query or fragment"),
        ("https://gpu.example.com/v1", "must be the shim base URL without a path"),
        ("https://gpu.example.com:99999", "must be a valid URL"),
        ("https://", "must name a host"),
    ],
)
def test_rejected_urls(url, message):
    assert rejects(message, OMINIX_V0_SCHEDULER_URL=url).startswith("OMINIX_V0_SCHEDULER_URL ")


@pytest.mark.parametrize("token", ["a\r\nX-Injected: 1", "a\x00b", "t\u00e9"])
def test_token_must_be_a_header_value(token):
    rejects("OMINIX_V0_SCHEDULER_TOKEN must be a valid HTTP header value", OMINIX_V0_SCHEDULER_TOKEN=token)


def test_non_utf8_environment_value():
    # os.environ keeps undecodable bytes as lone surrogates
    rejects("OMINIX_V0_SCHEDULER_MODELS must be valid UTF-8", OMINIX_V0_SCHEDULER_MODELS="a\udcff")


def test_mapped_id_colliding_with_a_local_llm_model():
    with pytest.raises(
        CudaConfigError,
        match="LLM_MODEL collides with an exact OminiX-SGLang route; configure one backend for model ominix-tiny-qwen3",
    ):
        route(OMINIX_V0_SCHEDULER_MODELS="x,ominix-tiny-qwen3")
    env = {**GOOD, "LLM_MODEL": "qwen3-8b-cuda"}
    with pytest.raises(CudaConfigError, match="LLM_MODEL collides"):
        GraphArgs.from_args({}, environ=env).cuda_route()
    # no local LLM slot, no collision
    assert GraphArgs.from_args({"llm": {"enabled": False}}, environ=env).cuda_route() is not None


def test_graph_args_block_and_env_override():
    args = {
        "cuda": {
            "scheduler_url": "http://127.0.0.1:30000",
            "scheduler_token": "from-args",
            "scheduler_models": ["a", "b"],
            "served_model": "served",
            "scheduler_timeout_secs": 60,
            "chat_template_kwargs": {"enable_thinking": False},
        }
    }
    r = GraphArgs.from_args(args, environ={}).cuda_route()
    assert (r.models, r.timeout_s, r.chat_template_kwargs) == (("a", "b"), 60, {"enable_thinking": False})
    r = GraphArgs.from_args(
        args, environ={"OMINIX_V0_SCHEDULER_MODELS": "c", "OMINIX_V0_SCHEDULER_TIMEOUT_SECS": "9"}
    ).cuda_route()
    assert r.models == ("c",) and r.timeout_s == 9 and r.token == "from-args"
    with pytest.raises(ConfigError, match="OMINIX_V0_SCHEDULER_URL must not be empty"):
        GraphArgs.from_args(args, environ={"OMINIX_V0_SCHEDULER_URL": ""}).cuda_route()


def test_graph_args_apply_the_same_rules():
    with pytest.raises(CudaConfigError, match="OMINIX_V0_SCHEDULER_TOKEN is required"):
        GraphArgs.from_args({"cuda": {"scheduler_url": "https://x.example"}}, environ={}).cuda_route()


def test_build_app_fails_closed_on_a_bad_route(monkeypatch):
    from graphs.omni import build_app

    for var, value in {**GOOD, "OMINIX_V0_SCHEDULER_MODELS": "*"}.items():
        monkeypatch.setenv(var, value)
    with pytest.raises(CudaConfigError, match="wildcards"):
        build_app({"check_models": False})


# ---- the CUDA route and the ingress's security settings ------------------------------------


def test_no_wildcard_cors_with_a_cuda_route():
    assert GraphArgs.from_args({}, environ={}).ingress_settings("127.0.0.1").cors_origins == ["*"]
    assert GraphArgs.from_args({}, environ=GOOD).ingress_settings("127.0.0.1").cors_origins == []
    explicit = {**GOOD, "OMINIX_CORS_ORIGINS": "https://app.example.com"}
    assert GraphArgs.from_args({}, environ=explicit).ingress_settings("127.0.0.1").cors_origins == [
        "https://app.example.com"
    ]
    with pytest.raises(CudaConfigError, match="wildcard CORS"):
        GraphArgs.from_args({}, environ={**GOOD, "OMINIX_CORS_ORIGINS": "*"}).ingress_settings("127.0.0.1")


def chat_timeout(settings):
    return settings.policy_for("/v1/chat/completions").timeout_s


def test_chat_timeout_leaves_room_for_the_cuda_timeout():
    local = chat_timeout(GraphArgs.from_args({}, environ={}).ingress_settings(None))
    assert chat_timeout(GraphArgs.from_args({}, environ=GOOD).ingress_settings(None)) == 1810
    short = {**GOOD, "OMINIX_V0_SCHEDULER_TIMEOUT_SECS": "5"}
    assert chat_timeout(GraphArgs.from_args({}, environ=short).ingress_settings(None)) == local
    # other routes keep their own timeouts
    settings = GraphArgs.from_args({}, environ=GOOD).ingress_settings(None)
    assert settings.policy_for("/v1/completions").timeout_s == local
