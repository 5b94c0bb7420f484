"""Pure vector logic of the embeddings slot: Matryoshka truncation and whether a model allows
it. No Ray, no MLX.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np

# Families trained with Matryoshka representation learning, so a prefix of the vector is an
# embedding too (Qwen3-Embedding, EmbeddingGemma). Other models say so in their
# sentence-transformers config (`matryoshka_dims`) or the slot's config lists them.
MATRYOSHKA_MODEL_TYPES = frozenset({"qwen3", "gemma3_text"})


def truncatable_dims(model_dir: Path, model_type: Optional[str]) -> Optional[list[int]]:
    """The sizes a model's vectors may be truncated to ([] = any size), or None if it was not
    trained for truncation."""
    st_config = model_dir / "config_sentence_transformers.json"
    if st_config.exists():
        dims = json.loads(st_config.read_text()).get("matryoshka_dims")
        if dims:
            return sorted(int(d) for d in dims)
    return [] if model_type in MATRYOSHKA_MODEL_TYPES else None


def truncate(vectors: np.ndarray, dimensions: Optional[int]) -> np.ndarray:
    """The first `dimensions` components of each row, L2-normalised again (as
    sentence-transformers' `truncate_dim` and OpenAI's `dimensions` do)."""
    if dimensions is None or dimensions >= vectors.shape[-1]:
        return vectors
    head = vectors[..., :dimensions]
    norms = np.linalg.norm(head, axis=-1, keepdims=True)
    return head / np.maximum(norms, 1e-12)
