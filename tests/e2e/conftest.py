"""One real graph per test session: `serve run` on the shipped serve_config.yaml.

Only the HTTP port (a free one) and the model cache directory (a fresh one, so the tiny model
is generated as on a first start) differ from what a user runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_serving(base_url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.time() + START_TIMEOUT_S
    probe = {"messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"serve run exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        _fail_if_deploy_failed(log)
        try:
            r = httpx.post(f"{base_url}/v1/chat/completions", json=probe, timeout=10)
            if r.status_code == 200 and _app_running():
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"graph not serving after {START_TIMEOUT_S}s:\n{log.read_text()[-4000:]}")


def _fail_if_deploy_failed(log: Path) -> None:
    from ray import serve

    try:
        app = serve.status().applications.get("ominix")
    except Exception:
        return
    if app is not None and app.status == "DEPLOY_FAILED":
        raise RuntimeError(f"the graph failed to deploy: {app.message}\n{log.read_text()[-4000:]}")


def _app_running() -> bool:
    """Every deployment of the app is up (chat answering says nothing about the other slots)."""
    from ray import serve

    app = serve.status().applications.get("ominix")
    return app is not None and app.status == "RUNNING"


# The session graph sits idle while the files with Ray clusters of their own run, so the tests
# that wait on an idle graph run around them, in this order, where test_operating.py would run:
# its idle console's window opens and spans test_multinode_voices.py; the TTS burst, then the
# other two such files during serve_config.yaml's downscale delay, then the burst's scale-down
# check. Those waits (30 s and 55 s of a CI run) are then spent on tests.
AROUND_OWN_CLUSTERS = (
    "test_operating.py",
    "test_multinode_voices.py",
    "test_operating.py::test_an_idle_graph_says_next_to_nothing",
    "test_tts_burst.py",
    "test_multinode.py",
    "test_sharded_llm.py",
    "test_tts_burst.py::test_the_slot_comes_back_to_its_minimum_after_the_burst",
)


def _place(item) -> int:
    """The item's place in AROUND_OWN_CLUSTERS (its test named, else its file), or -1."""
    name = f"{item.path.name}::{item.originalname}"
    if name in AROUND_OWN_CLUSTERS:
        return AROUND_OWN_CLUSTERS.index(name)
    return AROUND_OWN_CLUSTERS.index(item.path.name) if item.path.name in AROUND_OWN_CLUSTERS else -1


def pytest_collection_modifyitems(config, items):
    placed = [(place, i, item) for i, item in enumerate(items) if (place := _place(item)) >= 0]
    if not placed:
        return
    rest = [item for item in items if _place(item) < 0]
    first = next((i for i, item in enumerate(items) if item.path.name == AROUND_OWN_CLUSTERS[0]), placed[0][1])
    at = sum(1 for item in items[:first] if _place(item) < 0)
    items[:] = rest[:at] + [item for _, _, item in sorted(placed, key=lambda p: p[:2])] + rest[at:]


@pytest.fixture(scope="session")
def ray_cluster():
    """A private local Ray cluster (own ports), so parallel test sessions never collide.

    The test process is its driver, which lets tests look inside replicas through handles.
    """
    import ray

    dashboard_port = _free_port()
    ray.init(
        address="local",  # always a new cluster: a bare init() would join another session's
        # The CPUs and memory Ray detects, as under a user's `serve run`: the shipped resource
        # model (docs/resources.md) must fit every slot's max_replicas there, with room for the
        # small extra apps some tests deploy next to the graph (CUDA, keyed, two-replica).
        namespace="serve",
        include_dashboard=True,
        dashboard_host="127.0.0.1",
        dashboard_port=dashboard_port,
        log_to_driver=False,
    )
    yield {"gcs_address": ray.get_runtime_context().gcs_address, "dashboard_port": dashboard_port}
    ray.shutdown()


@pytest.fixture(scope="session")
def serve_work(tmp_path_factory) -> Path:
    """The session graph's directory: its patched config and `serve.log`."""
    return tmp_path_factory.mktemp("serve")


@pytest.fixture(scope="session")
def server(serve_work, cache_dir, ray_cluster):
    """Base URL of the graph, started with `serve run` on the shipped serve_config.yaml."""
    work = serve_work
    config = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    port = _free_port()
    config["http_options"]["port"] = port
    config["applications"][0]["args"]["cache_dir"] = str(cache_dir)
    config_path = work / "serve_config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    log = work / "serve.log"
    env = {k: v for k, v in os.environ.items() if k not in ("LLM_MODEL", "RAY_ADDRESS")}
    env["PYTHONUNBUFFERED"] = "1"
    serve_cli = Path(sys.executable).parent / "serve"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(serve_cli), "run", "--address", ray_cluster["gcs_address"], str(config_path)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_serving(base_url, proc, log)
        yield base_url
    finally:
        # Killed, not asked to shut Serve down: the session's cluster goes next (ray_cluster's
        # shutdown stops every process of it), and serve run's graceful stop of the graph's
        # replicas ran into its 60 s wait at the end of every run, checking nothing.
        with contextlib.suppress(ProcessLookupError):  # it may have died on its own
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.fixture(scope="session")
def serve_log(server, serve_work) -> Path:
    """What `serve run` of the session graph printed (stdout and stderr), as a user's terminal has it."""
    return serve_work / "serve.log"


@pytest.fixture(scope="session")
def dashboard_url(ray_cluster):
    return f"http://127.0.0.1:{ray_cluster['dashboard_port']}"


@pytest.fixture(scope="session")
def client(server):
    from openai import OpenAI

    return OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="session")
def aclient(server):
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="session")
def http(server):
    with httpx.Client(base_url=server, timeout=60) as c:
        yield c
