"""Who spoke each utterance of a streaming session (MiniInfer's `?diarize=1` on a session). Pure.

A session's audio is not kept: each finalised utterance leaves only its voice pieces (stream
times: sliding windows) and their GE2E embeddings, computed as the whole-file pipeline computes
them. Speakers
are the clustering of every piece heard so far (`clustering.cluster`, the whole-file
clustering), redone when a piece arrives: labels given while the session runs are provisional
(a later voice can regroup earlier pieces, and the numbering follows first appearance); the
answer to `finish=1` is the clustering of the whole session, so its labels are globally
consistent, as MiniInfer's final answer is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import numpy as np

from deployments.diarization.clustering import cluster
from deployments.diarization.config import DiarizationConfig, SpeakerCount
from deployments.diarization.spans import Span, Turn, speaker_of, voted_turns


class SpeakerTrack:
    def __init__(self, config: DiarizationConfig = DiarizationConfig(), count: SpeakerCount = SpeakerCount()):
        self.config = config
        self.count = count
        self.pieces: list[Span] = []
        self._embeddings: list[np.ndarray] = []
        self._turns: Optional[list[Turn]] = None  # the clustering of `pieces`; None: to redo

    def add(self, offset_s: float, pieces: Sequence[Span], embeddings: np.ndarray) -> None:
        """An utterance's voice pieces (times within the utterance, which began at `offset_s`
        in the stream) and their embeddings."""
        for piece, embedding in zip(pieces, embeddings):
            self.pieces.append(Span(offset_s + piece.start, offset_s + piece.end))
            self._embeddings.append(np.asarray(embedding))
        if len(pieces):
            self._turns = None

    def turns(self) -> list[Turn]:
        if not self.pieces:
            return []
        if self._turns is None:
            labels = cluster(np.stack(self._embeddings), [p.duration for p in self.pieces], self.config, self.count)
            self._turns = voted_turns(self.pieces, labels, self.config.frame_s, self.config.join_gap_s)
        return self._turns

    @property
    def speakers(self) -> int:
        return len({t.speaker for t in self.turns()})

    def speaker_of(self, start: float, end: float) -> int:
        """The 0-based speaker of [start, end] in stream seconds (0 before any voice)."""
        found = speaker_of(start, end, self.turns())
        return 0 if found is None else found
