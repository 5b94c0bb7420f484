"""Small offline speech models that are building blocks, not slots: Silero VAD (speech/silence
per 32 ms frame) and resemblyzer's GE2E speaker encoder (a voice as a 256-d unit vector).

Ray-free, MLX inside. Their weights ship in PyPI packages (`silero-vad`, `resemblyzer`) that are
installed without their own dependencies (torch): only the files are read, never imported.
"""

from __future__ import annotations

from deployments.hub import package_file

__all__ = ["package_file"]
