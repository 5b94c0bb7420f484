"""The VLM and embeddings blocks of the graph args: OminiX-API's VLM_MODEL, the image limits the
ingress gets through the catalog, the manifest's `vlm` category."""

from __future__ import annotations

from deployments.control.capabilities import categories, registry
from deployments.slots import SLOTS
from deployments.vlm.images import ImageLimits
from graphs.config import GraphArgs


def test_vlm_model_and_embeddings_model_set_the_defaults():
    config = GraphArgs.from_args(
        {}, environ={"VLM_MODEL": "mlx-community/Qwen2.5-VL-3B-Instruct-4bit", "EMBEDDINGS_MODEL": "/m"}
    )
    assert config.vlm.default_model == "mlx-community/Qwen2.5-VL-3B-Instruct-4bit"
    assert config.embeddings.default_model == "/m"
    assert config.defaults()["vlm"] == "mlx-community/Qwen2.5-VL-3B-Instruct-4bit"


def test_the_catalog_carries_the_image_limits_with_remote_fetch_off_by_default(tmp_path):
    entry = GraphArgs.from_args({"cache_dir": str(tmp_path), "vlm": {"max_images": 2}}, environ={}).catalog()["vlm"]
    limits = ImageLimits.from_dict(entry["options"]["image_limits"])
    assert limits.max_images == 2 and limits.allow_remote is False and limits.max_image_bytes == 10 * 2**20


def test_a_manifest_can_require_the_vlm_and_embeddings_categories():
    available = categories(registry(SLOTS[n] for n in GraphArgs.from_args({}, environ={}).slots()))
    assert "vision" in available["vlm"].capabilities and "embeddings" in available["embeddings"].capabilities
    off = GraphArgs.from_args({"vlm": {"enabled": False}}, environ={}).slots()
    assert "vlm" not in categories(registry(SLOTS[n] for n in off))
