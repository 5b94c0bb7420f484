"""Imports point down: the layers of docs/architecture.md, bottom to top, checked over the
source with `ast` (every import, those inside functions too). A module belongs to the layer of
its longest matching prefix; a new top-level module or package gets a place here."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SLOT_PACKAGES = tuple(
    f"deployments.{name}" for name in ("llm", "asr", "tts", "image", "vlm", "embeddings", "cuda_proxy")
)
CONTROL_REPLICA_SIDE = (  # what every slot replica runs of the control plane
    "deployments.control.agent",
    "deployments.control.idle",
    "deployments.control.replica_models",
    "deployments.control.residency",
    "deployments.control.policy",
    "deployments.control.state",
)

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "shared",  # pure or engine-level code that knows no slot
        (
            "deployments.__init__",
            "deployments.protocol",
            "deployments.audio",
            "deployments.audio_models",
            "deployments.kernels",
            "deployments.engine_thread",
            "deployments.env",
            "deployments.hub",
            "deployments.download_progress",
            "deployments.downloads",
            "deployments.metrics",
            "deployments.ray_metrics",
            "deployments.resources",
            "deployments.blas",
            "deployments.accelerator",
            "deployments.system_deps",
            "deployments.ray_internals",
            "deployments.routing",
            "deployments.diarization",
            "deployments.agent",
            "deployments.slot_types",
            "deployments.generation",
            "deployments.tiny_models",
            "deployments.similarity",
            "deployments.voices",  # voices beside the slots: the TTS slot and Control import them
            "deployments.records",  # the graph's record store, which Control holds
        ),
    ),
    ("replica", ("deployments.slot_replica", *CONTROL_REPLICA_SIDE)),
    ("slots", SLOT_PACKAGES),
    ("registry", ("deployments.slots",)),
    ("control", ("deployments.control",)),
    ("ingress", ("deployments.ingress",)),
    ("graphs", ("graphs",)),
    ("bench", ("bench",)),
)

# Imports that are known to break a rule below, each with its reason. Keep it empty.
ALLOWED: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    """A package's __init__ is the package, but for `deployments` itself: every module is in
    that package, while its __init__ (the version, the service name) is one shared module."""
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name if name == "deployments.__init__" else name.removesuffix(".__init__")


@cache
def modules() -> dict[str, Path]:
    files = [*ROOT.glob("deployments/**/*.py"), *ROOT.glob("graphs/**/*.py"), *ROOT.glob("bench/**/*.py")]
    return {module_name(path): path for path in files}


def _target(name: str) -> str:
    """The project module an imported name lives in (`deployments` itself: its __init__)."""
    known = modules()
    while name not in known and "." in name:
        name = name.rsplit(".", 1)[0]
    return "deployments.__init__" if name == "deployments" else name


@cache
def imports() -> frozenset[tuple[str, str]]:
    """(importer, imported) for every import of a project module."""
    edges = set()
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{module}: relative import"
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                if name.split(".")[0] in ("deployments", "graphs", "bench"):
                    target = _target(name)
                    if target != module:
                        edges.add((module, target))
    return frozenset(edges)


def layer_of(module: str) -> int | None:
    best = None
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), rank)
    return best[1] if best else None


def _in(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _slot_package(module: str) -> str | None:
    return next((p for p in SLOT_PACKAGES if _in(module, (p,))), None)


def test_every_module_has_a_layer():
    assert [m for m in modules() if layer_of(m) is None] == []


def upward_imports() -> list[tuple[str, str]]:
    return sorted((a, b) for a, b in imports() if layer_of(a) < layer_of(b) and (a, b) not in ALLOWED)


def test_imports_point_down():
    assert upward_imports() == []


def test_no_slot_package_imports_another():
    sideways = [(a, b) for a, b in imports() if _slot_package(a) and _slot_package(b) not in (None, _slot_package(a))]
    assert sorted(sideways) == []


def test_only_the_layers_above_reach_the_registry():
    below = (*SLOT_PACKAGES, "deployments.slot_replica", "deployments.control")
    assert sorted((a, b) for a, b in imports() if b == "deployments.slots" and _in(a, below)) == []


def test_control_imports_no_slot_package():
    reached = [(a, b) for a, b in imports() if _in(a, ("deployments.control",)) and _slot_package(b)]
    assert sorted(edge for edge in reached if edge not in ALLOWED) == []


def test_every_allowed_exception_still_exists():
    """An exception whose import is gone goes from ALLOWED too."""
    assert sorted(set(ALLOWED) - imports()) == []
