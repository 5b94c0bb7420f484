"""The model catalog: what each slot can run, and whether it is on disk.

Entries: each slot's built-in models (generated or converted locally, never downloaded), the
repos each slot allows (its `default_model` and `models` that are Hugging Face repo ids), and
the repos the docs recommend. Status comes from the Hugging Face cache (`scan_cache_dir`):
`ready` with its size on disk, `not_downloaded`, or `builtin`. `memory_required_mb` is the
figure OminiX-API's README gives for the model where it gives one (else null): a guide, not
a measurement here. No Ray, no MLX.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from deployments.hub import looks_like_repo_id


@dataclass(frozen=True)
class Recommended:
    repo_id: str
    slot: str
    description: str
    memory_mb: Optional[int] = None
    quantization: Optional[str] = None


# The repos the README and the API pages recommend per slot, with OminiX-API's memory figures.
RECOMMENDED = (
    Recommended("mlx-community/Qwen3-0.6B-4bit", "llm", "Qwen3 0.6B, the docs' first real LLM", None, "4bit"),
    Recommended("mlx-community/Qwen3-4B-bf16", "llm", "Qwen3 4B (OminiX-API's default example)", 8192, "bf16"),
    Recommended("mlx-community/Qwen3-8B-8bit", "llm", "Qwen3 8B", 8192, "8bit"),
    Recommended("mlx-community/Mistral-7B-Instruct-v0.3-4bit", "llm", "Mistral 7B Instruct v0.3", 4096, "4bit"),
    Recommended("mlx-community/Qwen3-TTS-12Hz-0.6B-Base-bf16", "tts", "Qwen3-TTS 0.6B Base: cloning", None, "bf16"),
    Recommended("black-forest-labs/FLUX.2-klein-4B", "image", "FLUX.2-klein 4B (OminiX-API's `flux`)", 13312),
    Recommended("Tongyi-MAI/Z-Image-Turbo", "image", "Z-Image-Turbo (OminiX-API's `zimage`)", 12288),
)


def cached_repos(cache_dir: Optional[Path] = None) -> dict[str, dict[str, Any]]:
    """repo id -> {"path", "size_bytes"} for every model repo in the Hugging Face cache."""
    from huggingface_hub import scan_cache_dir

    try:
        info = scan_cache_dir(cache_dir)
    except Exception:  # no cache yet
        return {}
    return {
        repo.repo_id: {"path": str(repo.repo_path), "size_bytes": repo.size_on_disk}
        for repo in info.repos
        if repo.repo_type == "model" and repo.revisions
    }


def catalog(
    allowed: dict[str, list[str]], builtins: dict[str, list[str]], cache_dir: Optional[Path] = None
) -> list[dict[str, Any]]:
    """The entries, in OminiX-API's CatalogModel shape (plus `slot`). `allowed` and `builtins`:
    slot -> model ids, as the graph's config has them."""
    on_disk = cached_repos(cache_dir)
    entries: dict[str, dict[str, Any]] = {}
    for slot, ids in builtins.items():
        for model in ids:
            entries[model] = _entry(model, slot, "Built in: generated or converted locally", "builtin", None)
    for rec in RECOMMENDED:
        if rec.slot in allowed:
            entries.setdefault(rec.repo_id, _repo_entry(rec.repo_id, rec.slot, rec.description, on_disk, rec))
    for slot, ids in allowed.items():
        for model in ids:
            if looks_like_repo_id(model):
                entries.setdefault(model, _repo_entry(model, slot, "Allowed in this graph's config", on_disk, None))
    return list(entries.values())


def _repo_entry(repo: str, slot: str, description: str, on_disk: dict, rec: Optional[Recommended]) -> dict:
    cached = on_disk.get(repo)
    entry = _entry(repo, slot, description, "ready" if cached else "not_downloaded", rec)
    entry["source"] = {
        "primary_url": f"https://huggingface.co/{repo}",
        "backup_urls": [],
        "source_type": "huggingface",
        "repo_id": repo,
        "revision": "main",
    }
    if cached:
        entry["storage"] = {
            "local_path": cached["path"],
            "total_size_bytes": cached["size_bytes"],
            "total_size_display": f"{cached['size_bytes'] / 1e9:.2f} GB",
        }
    return entry


def _entry(model: str, slot: str, description: str, status: str, rec: Optional[Recommended]) -> dict:
    return {
        "id": model,
        "name": model.split("/")[-1],
        "description": description,
        "category": slot.capitalize(),  # OminiX-API's enum names: Llm, Asr, Tts, Image
        "slot": slot,
        "tags": [slot],
        "source": None,
        "storage": {"local_path": None, "total_size_bytes": None, "total_size_display": None},
        "runtime": {
            "memory_required_mb": rec.memory_mb if rec else None,
            "quantization": rec.quantization if rec else None,
        },
        "status": status,
    }
