"""Grouping voice embeddings into speakers, and naming them. Pure numpy.

Agglomerative clustering with centroid linkage on cosine distance (pyannote's default
`AgglomerativeClustering(method="centroid")`): start with one cluster per speech span, merge
the two whose duration-weighted mean embeddings are closest, stop when the closest pair is
farther apart than `threshold` or, when the caller knows it, at exactly `num_speakers`
clusters. The mean of a cluster's unit vectors is the speaker's voice model, so long spans
weigh more than short ones, which embed less reliably.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from deployments.diarization.config import DiarizationConfig, SpeakerCount
from deployments.diarization.spans import letters
from deployments.similarity import cosine, unit_rows


def cosine_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[len(a), len(b)]: 1 - cosine similarity (0 the same direction, 2 opposite)."""
    return 1.0 - cosine(a, b)


def agglomerate(
    embeddings: np.ndarray,
    threshold: float,
    num_speakers: int | None = None,
    weights: Sequence[float] | None = None,
) -> list[int]:
    """A cluster label per embedding, 0.. in order of first appearance. With `num_speakers`,
    merging goes on (or stops) until that many clusters remain, whatever the distances; with
    fewer embeddings than `num_speakers`, each is its own cluster."""
    n = len(embeddings)
    if n == 0:
        return []
    weights = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    sums = unit_rows(embeddings) * weights[:, None]  # a cluster's weighted sum of unit vectors
    members = [[i] for i in range(n)]
    alive = np.ones(n, dtype=bool)
    distances = cosine_distances(sums, sums)
    np.fill_diagonal(distances, np.inf)
    target = 1 if num_speakers is None else max(1, num_speakers)
    while alive.sum() > target:
        i, j = np.unravel_index(np.argmin(distances), distances.shape)
        if num_speakers is None and distances[i, j] > threshold:
            break
        i, j = min(i, j), max(i, j)
        sums[i] += sums[j]
        members[i] += members[j]
        alive[j] = False
        distances[j, :] = distances[:, j] = np.inf
        row = cosine_distances(sums[i : i + 1], sums)[0]
        row[~alive] = np.inf
        row[i] = np.inf
        distances[i, :] = distances[:, i] = row
    labels = np.empty(n, dtype=int)
    for cluster, idx in enumerate(m for k, m in enumerate(members) if alive[k]):
        labels[idx] = cluster
    return first_appearance(labels.tolist())


def first_appearance(labels: Sequence[int]) -> list[int]:
    """The same partition, renumbered 0, 1, ... in the order the clusters first occur."""
    order: dict[int, int] = {}
    return [order.setdefault(label, len(order)) for label in labels]


def centroids(embeddings: np.ndarray, labels: Sequence[int], weights: Sequence[float] | None = None) -> np.ndarray:
    """[n_clusters, dim]: each cluster's weighted mean direction, as a unit vector."""
    x = unit_rows(embeddings)
    w = np.ones(len(x)) if weights is None else np.asarray(weights, dtype=np.float64)
    labels = np.asarray(labels)
    return unit_rows(np.stack([(x[labels == k] * w[labels == k, None]).sum(0) for k in range(labels.max() + 1)]))


def nearest(embeddings: np.ndarray, centres: np.ndarray) -> list[int]:
    """The index of the closest centre for each embedding."""
    return np.argmin(cosine_distances(embeddings, centres), axis=1).tolist()


def name_speakers(centres: np.ndarray, known: Mapping[str, np.ndarray], max_distance: float) -> list[str]:
    """A label per cluster: the known speaker whose reference embedding is closest, if within
    `max_distance`, each name used once (best matches first); the other clusters get letters in
    cluster order (A, B, ...), as OpenAI labels unknown voices."""
    names: list[str | None] = [None] * len(centres)
    if known and len(centres):
        refs = list(known)
        d = cosine_distances(centres, np.stack([known[r] for r in refs]))
        for flat in np.argsort(d, axis=None):
            c, r = np.unravel_index(flat, d.shape)
            if d[c, r] > max_distance:
                break
            if names[c] is None and refs[r] not in names:
                names[c] = refs[r]
    spare = iter(letters(len(centres), known))
    return [name if name is not None else next(spare) for name in names]


def cluster(
    embeddings: np.ndarray, durations: Sequence[float], config: DiarizationConfig, count: SpeakerCount = SpeakerCount()
) -> list[int]:
    """Cluster the pieces long enough to embed well (by the threshold, then to the count the
    caller asked for if it differs), then give each short piece the speaker of the nearest
    centroid; labels renumbered in order of appearance."""
    durations = np.asarray(durations, dtype=np.float64)
    solid = np.flatnonzero(durations >= config.min_embed_s)
    if len(solid) == 0:
        solid = np.arange(len(durations))
    x, w = embeddings[solid], durations[solid]
    solid_labels = agglomerate(x, config.threshold, count.exactly, w)
    target = count.target(max(solid_labels) + 1)
    if target is not None and target != max(solid_labels) + 1:
        solid_labels = agglomerate(x, config.threshold, target, w)
    labels = np.asarray(nearest(embeddings, centroids(x, solid_labels, w)))
    labels[solid] = solid_labels
    return first_appearance(labels.tolist())
