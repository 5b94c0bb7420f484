"""The image slot's graph args: the shipped config, IMAGE_MODEL, aliases in the catalog, the
control plane's defaults."""

from pathlib import Path

import pytest
import yaml

from deployments.ingress.catalog import ModelCatalog
from deployments.protocol.errors import APIError
from graphs.config import GraphArgs

ROOT = Path(__file__).resolve().parents[3]


def shipped_args():
    return yaml.safe_load((ROOT / "serve_config.yaml").read_text())["applications"][0]["args"]


def test_shipped_config_serves_the_tiny_model_under_the_control_plane():
    config = GraphArgs.from_args(shipped_args(), environ={})
    assert config.image.default_model == "ominix-tiny-flux2-klein"
    assert config.defaults()["image"] == "ominix-tiny-flux2-klein"
    assert config.catalog()["image"]["models"] == ["ominix-tiny-flux2-klein"]


@pytest.mark.parametrize(
    "value,expected",
    [
        ("flux", "black-forest-labs/FLUX.2-klein-4B"),
        ("ZIMAGE", "Tongyi-MAI/Z-Image-Turbo"),
        ("/models/flux", "/models/flux"),
    ],
)
def test_image_model_env(value, expected):
    assert GraphArgs.from_args({}, environ={"IMAGE_MODEL": value}).image.default_model == expected


def test_disabled_slot_is_not_served_nor_managed():
    config = GraphArgs.from_args({"image": {"enabled": False}}, environ={})
    assert "image" not in config.catalog() and "image" not in config.defaults()


def test_catalog_resolves_aliases_to_allowed_models_only(tmp_path):
    args = {"cache_dir": str(tmp_path), "image": {"models": ["black-forest-labs/FLUX.2-klein-4B"]}}
    catalog = ModelCatalog.from_config(GraphArgs.from_args(args, environ={}).catalog())
    assert catalog.resolve("image", "Flux") == "black-forest-labs/FLUX.2-klein-4B"
    # Z-Image-Turbo is not in the allow-list: the alias names the slot's default (None), never it
    assert catalog.resolve("image", "zimage") is None
    assert catalog.canonical("image", "ZIMAGE") == "ominix-tiny-flux2-klein"
    with pytest.raises(APIError) as e:
        catalog.resolve("image", "Tongyi-MAI/Z-Image-Turbo")  # the id itself stays refused
    assert e.value.status_code == 404
    # quantized copies land in the models directory, which requests may name by path
    copy = tmp_path / "image" / "models" / "tiny-8bit"
    copy.mkdir(parents=True)
    assert catalog.resolve("image", str(copy)) == str(copy)
