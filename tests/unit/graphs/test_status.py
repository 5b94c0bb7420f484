"""`make status`'s graph part (graphs/status.py): the address it asks, under OminiX-API's
environment names as `make serve` applies them, and the lines it prints from /readyz."""

from __future__ import annotations

from graphs.status import lines, readyz_url

CONFIG = {"http_options": {"host": "127.0.0.1", "port": 8080}}


def test_the_address_is_the_one_make_serve_serves_on():
    assert readyz_url(CONFIG, {}) == "http://127.0.0.1:8080/readyz"
    assert readyz_url(CONFIG, {"PORT": "9001"}) == "http://127.0.0.1:9001/readyz"
    assert readyz_url({"http_options": {"host": "0.0.0.0", "port": 1}}, {}) == "http://127.0.0.1:1/readyz"
    tls = {"OMINIX_TLS_CERT": "/c.pem", "OMINIX_TLS_KEY": "/k.pem"}
    assert readyz_url(CONFIG, tls) == "https://127.0.0.1:8080/readyz"


def test_each_slot_says_its_mlx_backend_and_blas_and_every_warning_is_printed_once():
    missing = "system packages: ffmpeg is missing: ... Install it: `sudo apt-get install ffmpeg`"
    slow = "MLX's CPU matrix products use the reference BLAS ...: about 30x slower. Fix: `make setup`"
    body = {
        "status": "not_ready",
        "slots": {
            "llm": {
                "ready": True,
                "model": "m",
                "replicas": 2,
                "mlx": ["cuda (NVIDIA H200)", "metal (Apple M3 Max)"],  # a Mac and an NVIDIA node
                "blas": ["openblas"],
                "warnings": [],
            },
            "asr": {"ready": False, "reason": "no replica has loaded w yet", "blas": [], "warnings": [slow, missing]},
        },
        "ingress": {"warnings": [missing]},
    }
    assert lines(body) == [
        "graph: not_ready",
        "  llm         ready, m on 2 replica(s); MLX: cuda (NVIDIA H200), metal (Apple M3 Max); BLAS: openblas",
        "  asr         no replica has loaded w yet; MLX: not reported yet; BLAS: not reported yet",
        f"WARNING: {missing}",
        f"WARNING: {slow}",
    ]
