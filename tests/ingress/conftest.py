"""The ingress in process: `create_app()` over fake slot clients, driven by httpx's
ASGITransport (HTTP) and Starlette's TestClient (WebSocket). No Ray, no model."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml

from deployments.ingress.app import create_app
from deployments.ingress.catalog import ModelCatalog
from deployments.ingress.state import IngressState
from graphs.config import GraphArgs
from tests.ingress import fakes

ROOT = Path(__file__).resolve().parents[2]


def shipped_args(**changes) -> dict:
    args = yaml.safe_load((ROOT / "serve_config.yaml").read_text())["applications"][0]["args"]
    return {**args, **changes}


def ingress_state(config: GraphArgs, slots: dict, control=None) -> IngressState:
    return IngressState(
        catalog=ModelCatalog.from_config(config.catalog()),
        settings=config.ingress_settings("127.0.0.1"),
        slots={name: client for name, client in slots.items() if name in config.slots()},
        control=control,
    )


def default_slots() -> dict[str, fakes.FakeClient]:
    """Every slot, answering its main call plausibly (what a route needs to succeed)."""
    return {
        "llm": fakes.FakeClient(chat=fakes.generation(), completions=fakes.generation()),
        "asr": fakes.FakeClient(transcribe=fakes.transcript()),
        "tts": fakes.FakeClient(synthesize=fakes.speech(), describe=fakes.tts_facts),
        "image": fakes.FakeClient(),
        "embeddings": fakes.FakeClient(embed=fakes.embeddings()),
        "vlm": fakes.FakeClient(chat=fakes.generation("A red square", served_by="ominix-tiny-qwen2-vl")),
    }


@pytest.fixture
def slots() -> dict[str, fakes.FakeClient]:
    return default_slots()


@pytest.fixture
def host():
    """A real ASR SessionHost over the fakes' loudness VAD (tests/ingress/fakes.py)."""
    return fakes.session_host()[0]


@pytest.fixture
def state(slots, tmp_path) -> IngressState:
    """The shipped config's ingress state over the fake slots (a test reads it back: the records)."""
    return ingress_state(GraphArgs.from_args(shipped_args(cache_dir=str(tmp_path)), environ={}), slots)


@pytest.fixture
def app(state):
    return create_app(state)


@pytest.fixture
async def http(app):
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://ingress.test", timeout=30) as client:
        yield client
