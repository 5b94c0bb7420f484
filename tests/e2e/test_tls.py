"""HTTPS: a self-signed certificate through OminiX's env names; SSE works the same over TLS.

Needs its own Serve instance (HTTP options are per Serve instance), so it starts a second
local Ray cluster: slow.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import ROOT, _free_port

pytestmark = pytest.mark.slow


def _self_signed(directory: Path) -> tuple[Path, Path]:
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


def _trust(cert: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert))


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory, cache_dir):
    work = tmp_path_factory.mktemp("tls")
    cert, key = _self_signed(work)
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("LLM_MODEL", "RAY_ADDRESS")}
    env.update(PORT=str(port), OMINIX_TLS_CERT=str(cert), OMINIX_TLS_KEY=str(key), OMINIX_CACHE_DIR=str(cache_dir))
    log = work / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "graphs.serve", "--address", "local"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"https://127.0.0.1:{port}"
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                if httpx.get(f"{url}/v1/models", verify=_trust(cert), timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        else:
            raise AssertionError(log.read_text()[-3000:])
        yield url, cert
    finally:
        # Its own throwaway Ray cluster: a short chance to stop cleanly, then the whole process
        # group (serve run, Ray's daemons, the replicas). Serve's graceful shutdown of the full
        # graph outlasted a 60 s wait in CI: a minute of every run spent waiting for nothing.
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def test_https_with_streaming(tls_server):
    from openai import OpenAI

    url, cert = tls_server
    client = OpenAI(
        base_url=f"{url}/v1", api_key="unused", http_client=httpx.Client(verify=_trust(cert)), max_retries=0
    )
    chunks = list(
        client.chat.completions.create(
            model="ominix-tiny-qwen3", messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "length"


def test_plain_http_on_the_tls_port_is_refused(tls_server):
    url, _ = tls_server
    with pytest.raises(httpx.HTTPError):
        httpx.get(url.replace("https://", "http://") + "/health", timeout=5).raise_for_status()


async def test_wss_websocket_tts_with_the_self_signed_certificate(tls_server):
    import json

    import websockets

    url, cert = tls_server
    ws_url = url.replace("https://", "wss://") + "/ws/v1/tts"
    async with websockets.connect(ws_url, ssl=_trust(cert), open_timeout=60) as ws:
        assert json.loads(await ws.recv()) == {"event": "connected_success"}
        await ws.send(
            json.dumps(
                {
                    "event": "task_start",
                    "model": "ominix-tiny-pocket-tts",  # the code path only: fast
                    "voice_setting": {"voice_id": "alba"},
                    "audio_setting": {"format": "wav"},
                }
            )
        )
        assert json.loads(await ws.recv())["sample_rate"] == 24000
        await ws.send(json.dumps({"event": "task_continue", "text": "Hello over TLS. The audio is encrypted."}))
        audio = b""
        while True:
            message = json.loads(await ws.recv())
            assert message["event"] == "task_progress", message
            if message["is_final"]:
                break
            audio += bytes.fromhex(message["data"]["audio"])
        await ws.send(json.dumps({"event": "task_finish"}))
    assert audio[:4] == b"RIFF" and len(audio) > 44 + 2400  # a WAV stream with at least 0.05 s of audio
    with pytest.raises(ssl.SSLError):  # an untrusting client refuses the self-signed certificate
        async with websockets.connect(ws_url, ssl=ssl.create_default_context(), open_timeout=10):
            pass
