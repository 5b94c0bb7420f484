"""`python -m bench.mlx_audio_cpu [ARGS]`: `python -m mlx_audio.server [ARGS]` on a machine whose
MLX has no GPU backend (MLX's CPU build on Linux), for the scenarios that run it as a peer.

mlx-audio's inference worker (`mlx_audio/server_inference.py`, `_run`) makes a GPU stream next to
its CPU stream. The CPU build refuses that ("Cannot make gpu stream without gpu backend"), the
worker thread dies, and every HTTP transcription or speech request then waits forever (its
realtime WebSocket does not use that worker). Here, without a GPU, a GPU stream asked for is a
CPU stream; nothing else of the server changes.

Offline, mlx-audio's Kokoro G2P (misaki) would download spaCy's en_core_web_sm: it is given the
same PyPI copy the TTS slot uses (deployments/tts/kokoro.py `prepare_g2p`, in OMINIX_CACHE_DIR).
"""

from __future__ import annotations

import os
from pathlib import Path

import mlx.core as mx


def cpu_streams_for_gpu() -> None:
    if mx.is_available(mx.gpu):
        return
    new_stream = mx.new_stream
    mx.new_stream = lambda device: new_stream(mx.cpu if device == mx.gpu else device)


if __name__ == "__main__":
    cpu_streams_for_gpu()
    from deployments.hub import default_cache_dir
    from deployments.tts.kokoro import prepare_g2p

    prepare_g2p(Path(os.environ.get("OMINIX_CACHE_DIR") or default_cache_dir()))
    from mlx_audio.server import main

    main()
