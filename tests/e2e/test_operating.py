"""Watching the graph from a second terminal (docs/operating.md): `make status` (`serve status`
and `ray status` with RAY_AUTH_MODE=token) and the dashboard's API, against the session graph's
cluster, with Ray's token authentication on as a user's `serve run serve_config.yaml` has it.

The commands run as subprocesses with the environment of a fresh shell: no RAY_AUTH_MODE (the
test process has it, from starting the cluster), the cluster's addresses given the documented way.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

from deployments import accelerator, blas
from deployments.slots import SLOTS as REGISTRY

ROOT = Path(__file__).resolve().parents[2]
# An idle graph's console: at most this many lines a minute (Control's per-call access log is off,
# graphs/config.py `logging`), watched over a window of at least IDLE_WINDOW_S with the bound scaled to it.
IDLE_LINES_PER_MINUTE = 5
IDLE_WINDOW_S = 30
BIN = Path(sys.executable).parent
SLOTS = ("Ingress", "Control", *(slot.deployment_name for slot in REGISTRY.values()))


def second_terminal(ray_cluster, dashboard_url) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    return {**env, "RAY_DASHBOARD_ADDRESS": dashboard_url, "RAY_ADDRESS": ray_cluster["gcs_address"]}


def run(args, env) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_make_status_lists_every_slot_healthy_with_its_mlx_backend_and_blas(server, ray_cluster, dashboard_url):
    env = {**second_terminal(ray_cluster, dashboard_url), "PORT": server.rsplit(":", 1)[1]}  # as for make serve
    out = run(["make", "-s", "status", f"VENV={BIN.parent}"], env)
    assert out.returncode == 0, out.stdout + out.stderr
    serve_part, _, rest = out.stdout.partition("======== Autoscaler status")
    ray_part, _, graph_part = rest.partition("graph: ")
    app = yaml.safe_load(serve_part)["applications"]["ominix"]
    assert app["status"] == "RUNNING"
    assert {name: app["deployments"][name]["status"] for name in SLOTS} == {name: "HEALTHY" for name in SLOTS}
    assert "CPU" in ray_part and "memory" in ray_part  # `ray status`: what the replicas reserve
    # graphs/status.py: each slot of the shipped config, ready, with what its MLX runs on (the
    # replicas run on this machine, in this environment: what MLX runs on here) and its BLAS.
    fast = sys.platform.startswith("linux") and bool(blas.candidates())
    slot_lines = {line.split()[0]: line for line in graph_part.splitlines()[1:] if line.startswith("  ")}
    assert graph_part.startswith("ready") and set(slot_lines) == set(REGISTRY), graph_part
    assert all(("BLAS: openblas" if fast else "BLAS: ") in line for line in slot_lines.values()), graph_part
    here = accelerator.label(accelerator.runtime().as_dict())
    assert all(f"MLX: {here};" in line for line in slot_lines.values()), graph_part
    if fast:  # CI installs every system package: nothing to warn about
        assert "WARNING" not in graph_part, graph_part


def test_without_the_auth_mode_serve_status_is_refused(server, ray_cluster, dashboard_url):
    """Why `make status` sets RAY_AUTH_MODE=token: the bare CLI sends no token."""
    out = run([str(BIN / "serve"), "status"], second_terminal(ray_cluster, dashboard_url))
    assert out.returncode != 0 and "Authentication required" in out.stdout + out.stderr


def test_the_dashboard_takes_the_token_from_ray_get_auth_token(server, ray_cluster, dashboard_url):
    token = run([str(BIN / "ray"), "get-auth-token"], second_terminal(ray_cluster, dashboard_url))
    assert token.returncode == 0, token.stderr
    with httpx.Client(base_url=dashboard_url, timeout=30) as browser:
        assert browser.get("/api/serve/applications/").status_code == 401
        login = browser.post("/api/authenticate", headers={"Authorization": f"Bearer {token.stdout.strip()}"})
        assert login.status_code == 200, login.text
        r = browser.get("/api/serve/applications/")  # the session cookie the login page set
        assert r.status_code == 200 and "ominix" in r.json()["applications"]


# Where the idle window opened: the offset in serve run's output and the time. The window spans
# the files with Ray clusters of their own (tests/e2e/conftest.py), which leave this graph idle.
IDLE_WINDOW: list[tuple[int, float]] = []


def test_the_log_has_each_slots_ready_line_and_no_access_log(serve_log):
    """The replicas' own lines reach serve run's output (each slot's model-ready line, with its
    load time), so a quiet window below is a quiet graph, not a log that hears nothing. Opens
    the idle window."""
    so_far = serve_log.read_bytes()
    started = so_far.decode(errors="replace")
    assert " ready in " in started and "CALL watch" not in started, started[-4000:]
    IDLE_WINDOW.append((len(so_far), time.monotonic()))


def test_an_idle_graph_says_next_to_nothing(serve_log):
    """Idle `serve run` output after ready: a handful of lines a minute, not the ~100 a minute
    of Control's access log (`CALL watch OK 5003ms`) that the replicas' polling made. The window
    opened with the test above and spans at least IDLE_WINDOW_S, the bound scaled to it."""
    if not IDLE_WINDOW:  # run alone (-k): a window of its own
        test_the_log_has_each_slots_ready_line_and_no_access_log(serve_log)
    offset, opened = IDLE_WINDOW[-1]
    time.sleep(max(0.0, opened + IDLE_WINDOW_S - time.monotonic()))
    window_s = time.monotonic() - opened
    with open(serve_log, "rb") as log:
        log.seek(offset)
        lines = [line for line in log.read().decode(errors="replace").splitlines() if line.strip()]
    bound = math.ceil(IDLE_LINES_PER_MINUTE * window_s / 60)
    assert len(lines) <= bound, f"{len(lines)} lines in {window_s:.0f} s:\n" + "\n".join(lines[-40:])
