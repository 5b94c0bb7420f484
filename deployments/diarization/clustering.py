"""Grouping voice embeddings into speakers, and naming them. numpy and scipy.

Agglomerative clustering on cosine distance with average linkage (UPGMA: two clusters are as far
apart as their members are on average; scipy's `linkage(method="average")`), stopped at
`threshold` or, when the caller knows it, at exactly `num_speakers` clusters. Average rather than
centroid linkage, measured (docs/api/diarization.md): on a real telephone call the two voices'
1.2 s windows are 0.17 apart within a voice and 0.32 across (medians), but the mean directions
of the two voices are only 0.20 apart, so merging by centroids joins them at any threshold that
keeps one voice whole. The kept-apart clusters' duration-weighted mean directions are the
speakers' voice models (`centroids`), which known speakers are matched against.
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


def average_linkage(embeddings: np.ndarray, threshold: float, num_speakers: int | None = None) -> list[int]:
    """A cluster label per embedding, 0.. in order of first appearance: average linkage on
    cosine distance, cut at `threshold` or into `num_speakers` clusters (at most one per
    embedding)."""
    n = len(embeddings)
    if n < 2:
        return [0] * n
    from scipy.cluster.hierarchy import fcluster, linkage

    tree = linkage(unit_rows(embeddings), method="average", metric="cosine")
    if num_speakers is None:
        labels = fcluster(tree, threshold, criterion="distance")
    else:
        labels = fcluster(tree, min(max(1, num_speakers), n), criterion="maxclust")
    return first_appearance((labels - 1).tolist())


def cluster(
    embeddings: np.ndarray, durations: Sequence[float], config: DiarizationConfig, count: SpeakerCount = SpeakerCount()
) -> list[int]:
    """Speakers of voice pieces: the pieces long enough to embed well (at most
    `config.max_clustered` of them, evenly spread: memory grows with the square) are clustered
    by the threshold, then to the count the caller asked for if it differs; a small cluster that
    is not a distinct voice (`_kept_clusters`: a laugh, a stretch of two voices at once) is
    dissolved unless the count needs it; every other piece joins the nearest kept centroid.
    Labels renumbered in order of appearance."""
    durations = np.asarray(durations, dtype=np.float64)
    solid = np.flatnonzero(durations >= config.min_embed_s)
    if len(solid) == 0:
        solid = np.arange(len(durations))
    if len(solid) > config.max_clustered:
        solid = solid[np.linspace(0, len(solid) - 1, config.max_clustered).round().astype(int)]
    x, w = embeddings[solid], durations[solid]
    labels = average_linkage(x, config.threshold, count.exactly)
    target = count.target(max(labels) + 1)
    if target is not None and target != max(labels) + 1:
        labels = average_linkage(x, config.threshold, target)
    centres = centroids(x, labels, w)
    kept = _kept_clusters(np.asarray(labels), w, centres, config, count.exactly or count.at_least or 1)
    out = kept[nearest(embeddings, centres[kept])]
    solid_labels = np.asarray(labels)
    stays = np.isin(solid_labels, kept)
    out[solid[stays]] = solid_labels[stays]
    return first_appearance(out.tolist())


def mixture_distance(voice: np.ndarray, voices: np.ndarray) -> float:
    """Cosine distance from the unit vector `voice` to the closest mix of `voices` (rows): their
    non-negative combinations, the directions a window holding some of each embeds near."""
    from scipy.optimize import nnls

    amounts, _ = nnls(voices.T.astype(np.float64), voice.astype(np.float64))
    mix = amounts @ voices
    norm = float(np.linalg.norm(mix))
    return 1.0 - float(voice @ mix) / norm if norm > 0 else 1.0


def _kept_clusters(
    labels: np.ndarray, weights: np.ndarray, centres: np.ndarray, config: DiarizationConfig, at_least: int
) -> np.ndarray:
    """The clusters holding at least `min_speaker_share` of the weight; a smaller one, the
    biggest first, only if its voice is `distinct_voice` or farther from every mix of the voices
    kept before it (a speaker who says little; not a window across a change of speaker or a
    stretch of two voices at once, which embed between the voices they hold); and the biggest
    others up to `at_least` clusters.

    Measured on the real and Kokoro sets (docs/api/diarization.md): the windows across a change
    of Kokoro voice are 0.26-0.30 from the nearer voice but 0.20-0.24 from the mix of the two;
    the small clusters that are no speaker on the two-speaker recordings at most 0.23 from the
    mix; trn03's second speaker (one window, 1.2 s) 0.29, the Kokoro voices that say little
    0.37-0.40. Judged against the small voices kept too, not only the big ones, a meeting's
    small pieces of a voice already kept join it (tst00 through a telephone band: 4 speakers
    of 4 found, 14 when judged against the big clusters alone)."""
    share = np.bincount(labels, weights=weights) / max(weights.sum(), 1e-9)
    big = np.flatnonzero(share >= config.min_speaker_share)
    if len(big) == 0:
        big = np.array([int(share.argmax())])
    voices = big.tolist()
    for k in np.argsort(-share, kind="stable"):
        if k not in big and mixture_distance(centres[k], centres[voices]) >= config.distinct_voice:
            voices.append(int(k))
    kept = set(voices)
    for k in np.argsort(-share, kind="stable"):
        if len(kept) >= min(at_least, len(share)):
            break
        kept.add(int(k))
    return np.array(sorted(kept))
