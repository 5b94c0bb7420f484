"""Graph args: validation, OminiX environment overrides, the ingress catalog."""

import pytest
import yaml
from pydantic import ValidationError

from deployments.ingress.catalog import ModelCatalog
from deployments.protocol.errors import APIError
from graphs.config import GraphArgs


def shipped_args():
    with open("serve_config.yaml") as f:
        return yaml.safe_load(f)["applications"][0]["args"]


def test_shipped_config_validates_and_serves_the_tiny_model():
    config = GraphArgs.from_args(shipped_args(), environ={})
    assert config.llm.default_model == "ominix-tiny-qwen3"
    assert config.catalog()["llm"] == ["ominix-tiny-qwen3"]


def test_llm_model_env_overrides_the_default():
    config = GraphArgs.from_args(shipped_args(), environ={"LLM_MODEL": "mlx-community/Qwen3-0.6B-4bit"})
    assert config.llm.default_model == "mlx-community/Qwen3-0.6B-4bit"
    assert config.catalog()["llm"][0] == "mlx-community/Qwen3-0.6B-4bit"


def test_blank_env_is_ignored():
    assert GraphArgs.from_args({}, environ={"LLM_MODEL": "  "}).llm.default_model == "ominix-tiny-qwen3"


def test_typos_in_args_are_rejected():
    with pytest.raises(ValidationError):
        GraphArgs.from_args({"llm": {"default_modle": "x"}}, environ={})


def test_disabled_slot_is_not_in_the_catalog():
    assert "llm" not in GraphArgs.from_args({"llm": {"enabled": False}}, environ={}).catalog()


def test_catalog_routes_by_exact_id():
    catalog = ModelCatalog({"llm": ["a", "b"]})
    assert catalog.resolve("llm", None) == "a"
    assert catalog.resolve("llm", "b") == "b"
    with pytest.raises(APIError) as info:
        catalog.resolve("llm", "B")
    assert info.value.status_code == 404 and info.value.code == "model_not_found"
    assert [c.id for c in catalog.cards()] == ["a", "b"]
