"""Cosine similarity: the one way embeddings are compared here (voices in diarization and voice
fitting, text embeddings in tests). Pure numpy."""

from __future__ import annotations

import numpy as np


def unit_rows(embeddings: np.ndarray) -> np.ndarray:
    """Each row (the last axis) scaled to length 1; a zero row stays zero."""
    x = np.asarray(embeddings, dtype=np.float64)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norms == 0, 1.0, norms)


def cosine(a: np.ndarray, b: np.ndarray) -> float | np.ndarray:
    """Of two vectors: their cosine similarity, a float. Of two stacks of row vectors: the
    [len(a), len(b)] matrix of them. A zero vector is similar to nothing (0)."""
    similarity = unit_rows(a) @ unit_rows(b).T
    return float(similarity) if similarity.ndim == 0 else similarity
