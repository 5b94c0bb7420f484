"""Several nodes, as docs/multi-node.md sets them up: a head and two worker nodes, each its own
`ray start --block` process with a label, and `serve run` of serve_config.yaml as shipped plus
the placement block of docs/multi-node.md (only the LLM and TTS slots on, to fit the test machine).

The graph is started the way `make serve` starts it with OminiX's TLS variables
(`python -m graphs.serve`, OMINIX_TLS_CERT / OMINIX_TLS_KEY, a self-signed certificate): HTTP
options are per Serve instance, so HTTPS needs a cluster of its own, and this one is it.

Checked: every slot lands on the node its label selector names, requests are served across
nodes over HTTPS (SSE and the WebSocket TTS protocol over WSS; plain HTTP on the port and an
untrusting client are refused), and removing the speech node mid-run ends its in-flight stream
with a clean error while the LLM slot keeps serving, and its replica comes back on a new speech
node.

Everything goes through the CLIs and HTTP, as a user's terminals would; the test process's own
Ray session (the other e2e tests' cluster) is not touched.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Optional

import httpx
import pytest
import yaml

from tests.assertions import only_slots, wait_for, ws_tts_audio

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ROLE = "ominix.io/role"
TINY_TTS = "ominix-tiny-pocket-tts"
# Long enough that the stream is still running when its node is killed (max_input_chars raised below).
LONG_TEXT = " ".join(["The quick brown fox jumps over the lazy dog, then it runs far away."] * 240)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli_env() -> dict:
    """A fresh terminal's environment, with the token mode docs/multi-node.md exports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    # Fast node-death detection: the default waits ~30 s of missed health checks.
    return {
        **env,
        "RAY_AUTH_MODE": "token",
        "RAY_health_check_period_ms": "1000",
        "RAY_health_check_failure_threshold": "3",
        "PYTHONUNBUFFERED": "1",
    }


class Cluster:
    def __init__(self, work: Path):
        self.work = work
        self.port = free_port()
        self.dashboard_port = free_port()
        self.temp_dir = tempfile.mkdtemp(prefix="ray-mn-", dir="/tmp")  # short: Unix socket paths
        self.nodes: dict[str, subprocess.Popen] = {}
        self.tls: Optional[tuple[Path, Path]] = None  # (certificate, key) the graph serves HTTPS with

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, name: str, role: str, head: bool = False, env: Optional[dict] = None) -> None:
        """A node's `ray start`; `env` is that machine's own (its HOME, say)."""
        args = [
            str(BIN / "ray"),
            "start",
            "--block",
            "--num-cpus=1",
            "--node-ip-address=127.0.0.1",
            f"--temp-dir={self.temp_dir}",
            "--labels",
            f"{ROLE}={role}",
        ]
        if head:
            args += [
                "--head",
                f"--port={self.port}",
                "--include-dashboard=true",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={self.dashboard_port}",
            ]
        else:
            args += [f"--address={self.address}"]
        with open(self.work / f"{name}.log", "ab") as log:
            self.nodes[name] = subprocess.Popen(
                args,
                cwd=ROOT,
                env={**cli_env(), **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def join(self, name: str, role: str, timeout_s: float = 240, env: Optional[dict] = None) -> None:
        """Start a worker node and wait until the cluster lists it. Ray gives a node's raylet 30 s
        to register (hard-coded); on a loaded 2-core machine it can miss that and `ray start`
        exits, so a node that gave up is started again, as an operator would."""
        expected = len(self.alive_nodes()) + 1
        deadline = time.monotonic() + timeout_s
        self.start(name, role, env=env)
        while time.monotonic() < deadline:
            if len(self.alive_nodes()) >= expected:
                return
            if self.nodes[name].poll() is not None:  # gave up: try again
                self.start(name, role, env=env)
            time.sleep(2)
        raise AssertionError(
            f"node {name} did not join in {timeout_s} s: {(self.work / f'{name}.log').read_text()[-2000:]}"
        )

    def alive_nodes(self) -> list[dict]:
        out = subprocess.run(
            [
                str(BIN / "ray"),
                "list",
                "nodes",
                "--format=json",
                "--filter",
                "state=ALIVE",
                f"--address=http://127.0.0.1:{self.dashboard_port}",
            ],
            cwd=ROOT,
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        return json.loads(out.stdout) if out.stdout.lstrip().startswith("[") else []  # else: not up yet

    def kill(self, name: str) -> None:
        """The machine goes away at once: its `ray start`, GCS/raylet and every worker on it."""
        proc = self.nodes.pop(name)
        for pid in [proc.pid, *descendants(proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=30)

    def stop_all(self) -> None:
        """Every machine goes away at once, as in `kill`: nothing is checked after the module's
        tests, and `ray start --block`'s orderly stop (SIGTERM) took up to 30 s a node."""
        for name in list(self.nodes)[::-1]:
            self.kill(name)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def descendants(pid: int) -> list[int]:
    """Every process started under `pid` (children, their children...), from ps."""
    table = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout.split()
    children: dict[int, list[int]] = {}
    for child, parent in zip(map(int, table[::2]), map(int, table[1::2])):
        children.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def placement_from_docs() -> dict[str, dict]:
    """The `deployments:` block of docs/multi-node.md, by deployment name."""
    text = (ROOT / "docs" / "multi-node.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "label_selector" in b)
    return {d["name"]: d["ray_actor_options"] for d in yaml.safe_load(block)["deployments"]}


def graph_config(
    work: Path, cache_dir, slots: tuple[str, ...] = ("llm", "tts"), edit: Optional[Callable[[dict], None]] = None
) -> tuple[Path, int]:
    """serve_config.yaml with only `slots` on, placed as docs/multi-node.md says; `edit`
    changes the application (a test's own settings) before it is written."""
    from deployments.slots import SLOTS

    config = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    port = free_port()
    config["http_options"]["port"] = port
    app = config["applications"][0]
    app["args"]["cache_dir"] = str(cache_dir)
    app["args"].update(only_slots(*slots))  # the others off: three nodes on one small machine
    app["args"]["tts"]["max_input_chars"] = 20000
    placement = placement_from_docs()
    kept = {"Ingress", "Control", *(SLOTS[s].deployment_name for s in slots)}
    app["deployments"] = [
        {**d, "ray_actor_options": placement[d["name"]]} for d in app["deployments"] if d["name"] in kept
    ]
    if edit is not None:
        edit(app)
    path = work / "serve_config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, port


def start_graph(cluster: Cluster, config: Path, tls: Optional[tuple[Path, Path]] = None) -> subprocess.Popen:
    """`serve run` of `config` on the cluster, from a terminal of its own (log: serve.log); with
    `tls` (certificate, key), `python -m graphs.serve` with OminiX's TLS variables instead, as
    `make serve` is run for HTTPS (docs/security.md)."""
    command, env = [str(BIN / "serve"), "run", "--address", cluster.address, str(config)], cli_env()
    if tls is not None:
        command = [sys.executable, "-m", "graphs.serve", "--address", cluster.address]
        env.update(OMINIX_SERVE_CONFIG=str(config), OMINIX_TLS_CERT=str(tls[0]), OMINIX_TLS_KEY=str(tls[1]))
    with open(cluster.work / "serve.log", "wb") as log:
        return subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_graph(serve_proc: Optional[subprocess.Popen]) -> None:
    """`serve run` killed with its process group: its cluster goes next (`stop_all`), so Serve's
    graceful shutdown of every replica (a minute on the loaded box) would check nothing."""
    if serve_proc is None:
        return
    try:
        os.killpg(serve_proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    serve_proc.wait(timeout=30)


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for localhost and 127.0.0.1, and its key (PEM files in `directory`)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def trusting(cert: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert))


def origin(http: httpx.Client) -> str:
    """The graph's https://host:port, without a trailing slash."""
    return str(http.base_url).rstrip("/")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, cache_dir):
    work = tmp_path_factory.mktemp("multinode")
    cluster = Cluster(work)
    serve_proc = None
    try:
        cluster.start("head", "head", head=True)
        wait_for(lambda: len(cluster.alive_nodes()) == 1, 240)
        cluster.join("llm", "llm")
        cluster.join("speech", "speech")
        config, port = graph_config(work, cache_dir)
        cluster.tls = self_signed(work)
        serve_proc = start_graph(cluster, config, tls=cluster.tls)
        http = httpx.Client(base_url=f"https://127.0.0.1:{port}", timeout=60, verify=trusting(cluster.tls[0]))
        wait_for(lambda: ready(http, serve_proc, work), 300)
        yield cluster, http
    finally:
        stop_graph(serve_proc)
        cluster.stop_all()


def ready(http: httpx.Client, serve_proc, work: Path, slots: tuple[str, ...] = ("llm", "tts")) -> bool:
    assert serve_proc.poll() is None, (work / "serve.log").read_text()[-4000:]
    try:
        status = http.get("/v1/models/status")
    except httpx.HTTPError:
        return False
    if status.status_code != 200:
        return False
    return all(status.json()["slots"].get(s, {}).get("replicas") for s in slots)


def roles(http: httpx.Client, slot: str) -> list[str]:
    """The node label of each replica of a slot, from the replicas' own reports."""
    replicas = http.get("/v1/models/status").json()["slots"][slot]["replicas"]
    return [r["node"]["labels"].get(ROLE) for r in replicas]


def chat(http: httpx.Client) -> str:
    body = {"model": "ominix-tiny-qwen3", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def speak(http: httpx.Client) -> bytes:
    r = http.post("/v1/audio/speech", json={"model": TINY_TTS, "input": "Hello there.", "response_format": "pcm"})
    assert r.status_code == 200, r.text
    return r.content


def test_slots_land_where_their_labels_say_and_serve_across_nodes(cluster):
    _, http = cluster
    assert roles(http, "llm") == ["llm"]
    assert roles(http, "tts") == ["speech"]
    assert chat(http) is not None  # head (proxy, ingress) -> the llm node
    assert len(speak(http)) > 0  # head -> the speech node


def test_https_with_streaming(cluster):
    from openai import OpenAI

    c, http = cluster
    client = OpenAI(
        base_url=f"{origin(http)}/v1",
        api_key="unused",
        http_client=httpx.Client(verify=trusting(c.tls[0])),
        max_retries=0,
    )
    chunks = list(
        client.chat.completions.create(
            model="ominix-tiny-qwen3",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=4,
            temperature=0,
            stream=True,
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "length"


def test_plain_http_on_the_tls_port_is_refused(cluster):
    _, http = cluster
    with pytest.raises(httpx.HTTPError):
        httpx.get(origin(http).replace("https://", "http://") + "/health", timeout=5).raise_for_status()


async def test_wss_websocket_tts_with_the_self_signed_certificate(cluster):
    import websockets

    c, http = cluster
    ws_url = origin(http).replace("https://", "wss://") + "/ws/v1/tts"
    async with websockets.connect(ws_url, ssl=trusting(c.tls[0]), open_timeout=60) as ws:
        assert json.loads(await ws.recv()) == {"event": "connected_success"}
        start = {"event": "task_start", "model": TINY_TTS, "voice_setting": {"voice_id": "alba"}}
        await ws.send(json.dumps({**start, "audio_setting": {"format": "wav"}}))
        assert json.loads(await ws.recv())["sample_rate"] == 24000
        await ws.send(json.dumps({"event": "task_continue", "text": "Hello over TLS. The audio is encrypted."}))
        audio = await ws_tts_audio(ws)
        await ws.send(json.dumps({"event": "task_finish"}))
    assert audio[:4] == b"RIFF" and len(audio) > 44 + 2400  # a WAV stream with at least 0.05 s of audio
    with pytest.raises(ssl.SSLError):  # an untrusting client refuses the self-signed certificate
        async with websockets.connect(ws_url, ssl=ssl.create_default_context(), open_timeout=10):
            pass


def tts_nodes(http: httpx.Client) -> set[str]:
    return {r["node"]["id"] for r in http.get("/v1/models/status").json()["slots"]["tts"]["replicas"]}


def test_a_lost_node_ends_its_streams_cleanly_and_its_slot_comes_back(cluster):
    c, http = cluster
    lost_node = tts_nodes(http)
    body = {"model": TINY_TTS, "input": LONG_TEXT, "response_format": "pcm", "stream_format": "sse"}
    events = []
    with http.stream("POST", "/v1/audio/speech", json=body, timeout=120) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        events.append(json.loads(next(line for line in lines if line.startswith("data:"))[5:]))
        c.kill("speech")  # the speech machine goes away mid-stream
        t0 = time.monotonic()
        events += [json.loads(line[5:]) for line in lines if line.startswith("data:")]
        ended_after = time.monotonic() - t0
    assert events[0]["type"] == "speech.audio.delta"
    assert "node was lost" in events[-1]["error"]["message"], events[-1]
    assert ended_after < 60

    assert chat(http) is not None  # the LLM slot, on its own node, keeps serving
    wait_for(lambda: len(c.alive_nodes()) == 2, 60)

    c.join("speech-2", "speech")  # a new machine with the speech label joins
    wait_for(lambda: tts_nodes(http) not in (set(), lost_node) and roles(http, "tts") == ["speech"], 240)
    assert len(speak(http)) > 0
