"""Agglomerative clustering on cosine distance (average linkage), the speaker count options,
small clusters dissolved, and naming clusters after known speakers. Synthetic embeddings: unit
vectors scattered around a few voices."""

from __future__ import annotations

import numpy as np
import pytest

from deployments.diarization.clustering import (
    average_linkage,
    centroids,
    cosine_distances,
    first_appearance,
    letters,
    mixture_distance,
    name_speakers,
    nearest,
)
from deployments.diarization.config import DiarizationConfig, SpeakerCount
from deployments.diarization.pipeline import cluster


def voices(n: int, dim: int = 32, seed: int = 0) -> np.ndarray:
    """`n` random voice directions (near orthogonal in 32 dimensions: cosine distance ~1)."""
    v = np.random.default_rng(seed).standard_normal((n, dim))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x)


def around(voice: np.ndarray, n: int, spread: float, seed: int) -> np.ndarray:
    x = voice + spread * np.random.default_rng(seed).standard_normal((n, len(voice))) / np.sqrt(len(voice))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_cosine_distances():
    a = np.array([[1.0, 0.0], [0.0, 2.0]])
    np.testing.assert_allclose(cosine_distances(a, a), [[0, 1], [1, 0]], atol=1e-12)
    np.testing.assert_allclose(cosine_distances(a[:1], -a[:1]), [[2.0]])


def test_interleaved_speakers_are_found_by_the_threshold():
    v = voices(3)
    order = [0, 1, 0, 2, 1, 0, 2, 2, 1]
    x = np.stack([around(v[s], 1, 0.3, seed=i)[0] for i, s in enumerate(order)])
    assert average_linkage(x, threshold=0.3) == first_appearance(order)


def test_threshold_decides_how_many():
    v = voices(2)
    x = np.concatenate([around(v[0], 4, 0.3, 1), around(v[1], 4, 0.3, 2)])
    assert max(average_linkage(x, threshold=0.3)) + 1 == 2
    assert max(average_linkage(x, threshold=1.9)) + 1 == 1  # everything is one voice
    assert max(average_linkage(x, threshold=1e-6)) + 1 == 8  # nothing merges


def test_exact_count_overrides_the_threshold():
    v = voices(2)
    x = np.concatenate([around(v[0], 4, 0.3, 1), around(v[1], 4, 0.3, 2)])
    assert average_linkage(x, threshold=1.9, num_speakers=2) == [0] * 4 + [1] * 4
    assert max(average_linkage(x, threshold=0.3, num_speakers=3)) + 1 == 3  # one voice is split
    assert average_linkage(x[:2], threshold=1.9, num_speakers=5) == [0, 1]  # fewer pieces than speakers
    assert average_linkage(np.zeros((0, 4)), 0.3) == []


def test_weights_make_long_pieces_dominate_a_centroid():
    x = np.array([[1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(centroids(x, [0, 0], [3.0, 1.0])[0], np.array([3.0, 1.0]) / np.sqrt(10))
    assert nearest(np.array([[0.9, 0.1], [0.1, 0.9]]), x) == [0, 1]


def test_speaker_count_bounds():
    assert SpeakerCount().target(3) is None
    assert SpeakerCount(exactly=2).target(3) == 2
    assert SpeakerCount(at_least=2).target(1) == 2 and SpeakerCount(at_least=2).target(3) is None
    assert SpeakerCount(at_most=2).target(4) == 2 and SpeakerCount(at_most=2).target(1) is None


def test_short_pieces_join_the_nearest_speaker_and_bounds_recluster():
    v = voices(2)
    x = np.concatenate([around(v[0], 3, 0.3, 1), around(v[1], 3, 0.3, 2), around(v[1], 1, 0.3, 3)])
    durations = [2.0] * 6 + [0.2]  # the last piece is too short to cluster
    config = DiarizationConfig(threshold=0.3, min_embed_s=0.6)
    assert cluster(x, durations, config) == [0, 0, 0, 1, 1, 1, 1]
    assert cluster(x, durations, config, SpeakerCount(at_least=3)).count(2) >= 1  # forced to 3
    assert set(cluster(x, durations, config, SpeakerCount(at_most=1))) == {0}


def test_letters():
    assert letters(3) == ["A", "B", "C"]
    assert letters(28)[25:] == ["Z", "AA", "AB"]


def test_known_speakers_name_their_closest_cluster_once():
    v = voices(3)
    centres = v.copy()
    known = {"agent": around(v[1], 1, 0.2, 5)[0], "customer": around(v[0], 1, 0.2, 6)[0]}
    assert name_speakers(centres, known, max_distance=0.3) == ["customer", "agent", "A"]
    # A reference far from every cluster names nobody; the unknown voices still get letters.
    assert name_speakers(centres, {"stranger": voices(1, seed=9)[0]}, max_distance=0.3) == ["A", "B", "C"]
    # Two references of one voice: only the closer gets the cluster.
    twins = {"near": around(v[2], 1, 0.05, 7)[0], "far": around(v[2], 1, 0.4, 8)[0]}
    assert name_speakers(centres, twins, max_distance=0.5) == ["A", "B", "near"]


def test_a_letter_never_repeats_a_known_name():
    v = voices(2)
    assert name_speakers(v, {"A": v[1]}, max_distance=0.3) == ["B", "A"]


@pytest.mark.parametrize("seed", range(5))
def test_labels_come_in_order_of_first_appearance(seed):
    v = voices(4, seed=seed)
    order = np.random.default_rng(seed).integers(0, 4, size=12)
    x = np.stack([around(v[s], 1, 0.2, seed * 100 + i)[0] for i, s in enumerate(order)])
    labels = average_linkage(x, threshold=0.3)
    assert labels == first_appearance(order.tolist())


def test_a_mix_of_voices_is_near_their_mixture_not_near_either():
    v = voices(3)
    for amounts in ([1.0, 1.0], [1.0, 0.8]):
        mix = unit(amounts[0] * v[0] + amounts[1] * v[1])
        assert mixture_distance(mix, v[:2]) < 1e-6 < 0.2 < cosine_distances(mix[None], v[:2]).min()
    assert mixture_distance(v[2], v[:2]) > 0.8  # a third voice: near neither, nor any mix
    assert mixture_distance(v[0], v[:1]) < 1e-6 and mixture_distance(-v[0], v[:1]) == 1.0


def test_a_small_cluster_is_a_speaker_only_if_its_voice_is_distinct():
    v = voices(3)
    # A window across a change of speaker: farther from either voice than `distinct_voice`
    # (kept by distance alone), but a mix of the two.
    across = unit(v[0] + v[1])
    two = np.concatenate([around(v[0], 10, 0.2, 1), around(v[1], 10, 0.2, 2)])
    durations = [1.2] * 21  # the extra window is 1 in 21: under the 10 % share
    config = DiarizationConfig(threshold=0.2, min_embed_s=1.0, min_speaker_share=0.1, distinct_voice=0.265)
    assert cosine_distances(across[None], v[:2]).min() > config.distinct_voice
    blended = cluster(np.concatenate([two, [across]]), durations, config)
    assert blended[:20] == [0] * 10 + [1] * 10 and blended[20] in (0, 1)
    assert cluster(np.concatenate([two, [across]]), durations, config, SpeakerCount(exactly=3))[20] == 2
    assert cluster(np.concatenate([two, around(v[2], 1, 0.2, 3)]), durations, config)[20] == 2  # a third voice
    # One speaker all along and a second who says one window's worth (AMI trn03): kept.
    one = np.concatenate([around(v[2], 1, 0.2, 4), around(v[0], 20, 0.2, 5)])
    assert cluster(one, durations, config) == [0] + [1] * 20


def test_long_recordings_cluster_a_bounded_spread_sample_of_windows():
    v = voices(2)
    order = [0, 1] * 300
    x = np.stack([around(v[s], 1, 0.3, seed=i)[0] for i, s in enumerate(order)])
    config = DiarizationConfig(threshold=0.3, min_embed_s=1.0, max_clustered=50)
    assert cluster(x, [1.2] * len(x), config) == first_appearance(order)  # the rest join the nearest


def test_a_small_cluster_that_mixes_a_kept_small_voice_joins_it():
    """Small clusters are judged biggest first against every voice kept so far: a third voice
    that says little is kept, and a window of it mixed with one of the big voices (a clip
    across a change of speaker) then joins it, not a fourth speaker."""
    v = voices(3)
    two = np.concatenate([around(v[0], 10, 0.2, 1), around(v[1], 10, 0.2, 2)])
    third = around(v[2], 2, 0.05, 3)
    mixed = unit(v[2] + 0.8 * v[0])  # 0.37 from every mix of the two big voices alone
    assert mixture_distance(mixed, v[:2]) > 0.3
    config = DiarizationConfig(threshold=0.2, min_embed_s=1.0, min_speaker_share=0.1, distinct_voice=0.265)
    labels = cluster(np.concatenate([two, third, [mixed]]), [1.2] * 23, config)
    assert labels == [0] * 10 + [1] * 10 + [2, 2, 2]
