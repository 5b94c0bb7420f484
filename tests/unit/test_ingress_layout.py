"""The ingress's one rule, read from the source: routers (deployments/ingress/routers/) parse the
request and return the response; everything that talks to a slot or another deployment (slot
clients, `SlotStream`, handles, the control plane, the CUDA proxy) is in
deployments/ingress/serving/, and serving/ never imports a router."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

INGRESS = Path(__file__).resolve().parents[2] / "deployments" / "ingress"
ROUTERS = sorted((INGRESS / "routers").glob("*.py"))
SERVING = sorted((INGRESS / "serving").glob("*.py"))

# What reaches a deployment: the state's clients, a client's handle, Serve's handles.
CLIENT_ATTRIBUTES = {"slot", "slots", "control", "control_plane", "cuda", "remote", "options"}
CLIENT_NAMES = {"SlotStream", "SlotClient", "DeploymentClient", "DeploymentHandle", "get_deployment_handle"}
CLIENT_MODULES = ("deployments.ingress.clients", "ray")
SLOT_CALLS = {"call", "stream"}  # a client's `call("method", ...)`, `stream("method", ...)`


def _is_catalog(node: ast.expr) -> bool:
    """`<...>.catalog`: the catalog's per-slot model lists are data, not clients."""
    return isinstance(node, ast.Attribute) and node.attr == "catalog"


def slot_access(source: str) -> list[str]:
    """Each place in `source` that talks to a deployment, as `line: what`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        what = None
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(CLIENT_MODULES):
            what = f"imports {node.module}"
        elif isinstance(node, ast.Import) and any(a.name.startswith(CLIENT_MODULES) for a in node.names):
            what = "imports " + ", ".join(a.name for a in node.names)
        elif isinstance(node, ast.Name) and node.id in CLIENT_NAMES:
            what = node.id
        elif isinstance(node, ast.Attribute) and node.attr in CLIENT_ATTRIBUTES and not _is_catalog(node.value):
            what = f".{node.attr}"
        elif isinstance(node, ast.Call) and _slot_call(node):
            what = f".{node.func.attr}({node.args[0].value!r}, ...)"
        if what is not None:
            found.append(f"{node.lineno}: {what}")
    return found


def _slot_call(node: ast.Call) -> bool:
    func, args = node.func, node.args
    return (
        isinstance(func, ast.Attribute)
        and func.attr in SLOT_CALLS
        and bool(args)
        and isinstance(args[0], ast.Constant)
        and isinstance(args[0].value, str)
    )


@pytest.mark.parametrize("path", ROUTERS, ids=lambda p: p.name)
def test_a_router_never_talks_to_a_slot(path: Path):
    assert slot_access(path.read_text()) == [], f"{path.name}: move the slot calls into ingress/serving/"


@pytest.mark.parametrize("path", SERVING, ids=lambda p: p.name)
def test_serving_never_imports_a_router(path: Path):
    imports = [
        node.module or ""
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("deployments.ingress.routers")
    ]
    assert imports == []


@pytest.mark.parametrize(
    "source",
    [
        'asr = state.slot("asr")',
        "names = list(state.slots)",
        'await client.call("transcribe", params, model=model)',
        'stream = await tts.stream("synthesize", params)',
        "from deployments.ingress.clients import SlotStream",
        "status = await state.control_plane().call('status')",
        "await state.cuda.call('readiness')",
        "handle.options(stream=True).chat.remote(request)",
        "from ray import serve",
    ],
)
def test_the_check_sees_each_way_to_reach_a_deployment(source: str):
    assert slot_access(source) != []


@pytest.mark.parametrize(
    "source",
    [
        'model = state.catalog.resolve("tts", request.model)',
        'spec = state.catalog.slots.get("image")',
        "return await ServingAgent(state).stream(request)",
        "return await ServingSpeech(state).speak(request, format, model)",
    ],
)
def test_parsing_and_delegating_pass(source: str):
    assert slot_access(source) == []
