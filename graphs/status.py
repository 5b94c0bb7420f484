"""`python -m graphs.status`, the last part of `make status`: each slot of the running graph
with its model, what its replicas' MLX runs on (the backend and device: cuda, metal or cpu), the
BLAS they multiply with and what they run without (ffmpeg, ...), read from the graph's own GET
/readyz (public: no API key needed).

The address is the one `make serve` serves on: serve_config.yaml's `http_options` under
OminiX-API's PORT / OMINIX_API_HOST / OMINIX_TLS_* (graphs/serve.py). A graph that does not
answer is said in one line, not an error: `serve status` above already tells that story.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from graphs.serve import apply_env

LOOPBACK = "127.0.0.1"


def readyz_url(config: dict, environ: Mapping[str, str]) -> str:
    http = apply_env(config, environ)["http_options"]
    host = http.get("host") or LOOPBACK
    host = LOOPBACK if host in ("0.0.0.0", "::") else host
    scheme = "https" if http.get("ssl_certfile") else "http"
    return f"{scheme}://{host}:{http.get('port', 8000)}/readyz"


def lines(body: dict[str, Any]) -> list[str]:
    """One line per slot, then one per warning, as `make status` prints them."""
    out = [f"graph: {body.get('status', '?')}"]
    warnings: list[str] = list(body.get("ingress", {}).get("warnings", []))
    for slot, info in body.get("slots", {}).items():
        state = (
            f"ready, {info.get('model')} on {info.get('replicas')} replica(s)"
            if info.get("ready")
            else info.get("reason")
        )
        mlx = ", ".join(info.get("mlx") or []) or "not reported yet"
        blas = ", ".join(info.get("blas") or []) or "not reported yet"
        out.append(f"  {slot:<11} {state}; MLX: {mlx}; BLAS: {blas}")
        warnings += [line for line in info.get("warnings", []) if line not in warnings]
    return out + [f"WARNING: {line}" for line in warnings]


def main() -> int:
    import httpx

    config_path = Path(os.environ.get("OMINIX_SERVE_CONFIG", "serve_config.yaml"))
    url = readyz_url(yaml.safe_load(config_path.read_text()), os.environ)
    try:
        # A self-signed certificate is the common case on loopback (docs/security.md).
        response = httpx.get(url, timeout=10, verify=not url.startswith(f"https://{LOOPBACK}"))
        body = response.json()
    except (httpx.HTTPError, ValueError) as e:
        print(f"graph: no answer at {url} ({e.__class__.__name__}; PORT= or OMINIX_SERVE_CONFIG= for another)")
        return 0
    print("\n".join(lines(body)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
