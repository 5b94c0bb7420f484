"""The few lines an idle graph logs (deployments/control/replica_models.py,
deployments/ingress/errors.py): a model ready with its load time and memory, a server-side
failure; a client's 4xx leaves no line."""

from __future__ import annotations

from deployments.control.replica_models import MiB, ready_line
from deployments.ingress.errors import failure_line
from deployments.protocol.errors import APIError, invalid_request


def test_a_ready_model_says_its_load_time_and_the_memory_it_took():
    before = {"mlx_active_bytes": 100 * MiB}
    after = {"mlx_active_bytes": 612 * MiB, "rss_bytes": 1500 * MiB}
    assert ready_line("tts", "ominix-kokoro-82m", 3.21, before, after) == (
        "tts slot: ominix-kokoro-82m ready in 3.2 s; MLX memory 612 MiB (+512 MiB), process RSS 1500 MiB"
    )
    # Where /proc is not there (macOS) there is no RSS to tell.
    assert ready_line("llm", "m", 0.04, {}, {"mlx_active_bytes": 0}).endswith("MLX memory 0 MiB (+0 MiB)")


def test_only_server_side_failures_leave_a_line():
    failed = APIError(503, "Model 'x' could not be loaded: out of memory", "service_unavailable")
    assert failure_line("POST", "/v1/audio/speech", failed) == (
        "POST /v1/audio/speech failed: 503 Model 'x' could not be loaded: out of memory"
    )
    assert failure_line("POST", "/v1/chat/completions", invalid_request("bad", "model")) is None
