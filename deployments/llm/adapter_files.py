"""LoRA adapters on disk, as `mlx_lm.lora` writes them: where one is, what it holds, and whether
it fits the model it is meant to run on.

An adapter is a directory with `adapter_config.json` (mlx-lm's training arguments: its
`fine_tune_type`, `lora` or `dora`, and `lora_parameters` with the `rank` and `scale`) and
`adapters.safetensors` (per adapted linear layer of the model, `<module path>.lora_a` of shape
[input, rank], `.lora_b` [rank, output], and for DoRA `.m` [output]). It is named by a local path
or a Hugging Face repo id (from the local cache; downloaded only where the hub is reachable).

Only the config and the safetensors header are read here, so an adapter that does not fit (a
wrong base: a module the model lacks or of other dimensions; a rank above the slot's limit; a
full fine-tune, which is a model, not an adapter) is refused with a message naming it before any
tensor is loaded (deployments/llm/lora.py loads the tensors on the engine thread).

No Ray, no MLX.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapters.safetensors"
ADAPTER_FILES = (CONFIG_FILE, WEIGHTS_FILE)
KINDS = ("lora", "dora")
_MAX_HEADER_BYTES = 64 << 20  # a safetensors header is JSON; anything larger is not an adapter


class AdapterError(ValueError):
    """An adapter that cannot be served; the message names it and says why (a 400)."""


@dataclass(frozen=True)
class ModuleShape:
    """One adapted linear layer: its input and output widths and the adapter's rank there."""

    input_dims: int
    output_dims: int
    rank: int
    magnitude: bool = False  # DoRA's `m`


@dataclass(frozen=True)
class AdapterLayout:
    """What an adapter's files say, checked to be one adapter: its kind, rank and scale, and the
    modules it adapts. `fingerprint` names its content (the prompt cache keys entries by it)."""

    name: str
    directory: Path
    kind: str
    rank: int
    scale: float
    modules: dict[str, ModuleShape] = field(default_factory=dict)
    fingerprint: str = ""

    @property
    def weights_file(self) -> Path:
        return self.directory / WEIGHTS_FILE


def resolve_directory(name: str, path: str, find_repo: Callable[[str], Path]) -> Path:
    """The local directory of an adapter named by `path`: a directory, else a Hugging Face repo
    id that `find_repo` finds (the hub's cache). Both files must be there."""
    local = Path(path).expanduser()
    if local.is_dir():
        directory = local
    else:
        try:
            directory = Path(find_repo(path))
        except Exception as e:
            raise AdapterError(
                f"Adapter '{name}': '{path}' is neither a local directory nor an adapter in the Hugging Face cache "
                f"({str(e).splitlines()[0] if str(e) else type(e).__name__})"
            ) from None
    missing = [f for f in ADAPTER_FILES if not (directory / f).is_file()]
    if missing:
        raise AdapterError(
            f"Adapter '{name}': {path} is not an mlx-lm adapter (missing {', '.join(missing)}; "
            f"mlx_lm.lora writes {' and '.join(ADAPTER_FILES)})"
        )
    return directory


def read_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The tensors a safetensors file holds (name -> dtype, shape), from its header alone."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError("not a safetensors file (no header)")
        (size,) = struct.unpack("<Q", raw)
        if size > _MAX_HEADER_BYTES:
            raise ValueError("not a safetensors file (header too large)")
        header = json.loads(f.read(size))
    if not isinstance(header, dict):
        raise ValueError("not a safetensors file (its header is no object)")
    return {
        name: (str(entry["dtype"]), tuple(int(d) for d in entry["shape"]))
        for name, entry in header.items()
        if name != "__metadata__"
    }


def read_layout(name: str, directory: Path) -> AdapterLayout:
    """The adapter in `directory` as its files describe it (AdapterError when they do not
    describe one adapter of one rank)."""
    try:
        config = json.loads((directory / CONFIG_FILE).read_text())
    except (OSError, ValueError) as e:
        raise AdapterError(f"Adapter '{name}': {CONFIG_FILE} cannot be read ({e})") from None
    if not isinstance(config, dict):
        raise AdapterError(f"Adapter '{name}': {CONFIG_FILE} is not a JSON object")
    kind = config.get("fine_tune_type", "lora")
    if kind == "full":
        raise AdapterError(
            f"Adapter '{name}' is a full fine-tune (fine_tune_type full): that is a model of its own; "
            "serve its directory as a model, not as an adapter"
        )
    if kind not in KINDS:
        raise AdapterError(f"Adapter '{name}': fine_tune_type {kind!r} is not served (lora or dora)")
    params = config.get("lora_parameters") or {}
    try:
        scale = float(params["scale"])
        rank = int(params["rank"])
    except (KeyError, TypeError, ValueError):
        raise AdapterError(f"Adapter '{name}': {CONFIG_FILE} needs lora_parameters.rank and .scale") from None
    try:
        tensors = read_header(directory / WEIGHTS_FILE)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise AdapterError(f"Adapter '{name}': {WEIGHTS_FILE} cannot be read ({e})") from None
    modules = _modules(name, tensors, kind)
    ranks = {m.rank for m in modules.values()}
    if ranks != {rank}:
        raise AdapterError(
            f"Adapter '{name}': {CONFIG_FILE} says rank {rank}, its tensors have rank {', '.join(map(str, sorted(ranks)))}"
        )
    return AdapterLayout(name, directory, kind, rank, scale, modules, fingerprint(directory))


def _modules(name: str, tensors: dict[str, tuple[str, tuple[int, ...]]], kind: str) -> dict[str, ModuleShape]:
    by_module: dict[str, dict[str, tuple[int, ...]]] = {}
    for key, (_, shape) in tensors.items():
        path, _, leaf = key.rpartition(".")
        if leaf not in ("lora_a", "lora_b", "m") or not path:
            raise AdapterError(f"Adapter '{name}': {key} is not a LoRA tensor (lora_a, lora_b, m)")
        by_module.setdefault(path, {})[leaf] = shape
    if not by_module:
        raise AdapterError(f"Adapter '{name}': {WEIGHTS_FILE} holds no tensors")
    out = {}
    for path, leaves in sorted(by_module.items()):
        a, b, m = leaves.get("lora_a"), leaves.get("lora_b"), leaves.get("m")
        if a is None or b is None or len(a) != 2 or len(b) != 2 or a[1] != b[0]:
            raise AdapterError(f"Adapter '{name}': {path} needs lora_a [input, rank] and lora_b [rank, output]")
        if (m is not None) != (kind == "dora") or (m is not None and m != (b[1],)):
            raise AdapterError(f"Adapter '{name}': {path}: a {kind} adapter's magnitude `m` does not match its kind")
        out[path] = ModuleShape(a[0], b[1], a[1], m is not None)
    return out


def check_fits(layout: AdapterLayout, linears: dict[str, tuple[int, int]], model_id: str, max_rank: int) -> None:
    """Refuse an adapter that does not fit the served model: `linears` is the model's linear
    layers (module path -> input, output widths), as the engine found them."""
    if layout.rank > max_rank:
        raise AdapterError(
            f"Adapter '{layout.name}' has rank {layout.rank}; this slot serves ranks up to {max_rank} (llm.max_lora_rank)"
        )
    for path, shape in layout.modules.items():
        dims = linears.get(path)
        if dims is None:
            raise AdapterError(
                f"Adapter '{layout.name}' does not fit model '{model_id}': it adapts {path}, which the model "
                "has no linear layer at (an adapter trained on another base model?)"
            )
        if dims != (shape.input_dims, shape.output_dims):
            raise AdapterError(
                f"Adapter '{layout.name}' does not fit model '{model_id}': {path} is {dims[0]} -> {dims[1]} "
                f"wide there, the adapter's is {shape.input_dims} -> {shape.output_dims} (an adapter trained on "
                "another base model?)"
            )


def fingerprint(directory: Path) -> str:
    """A hash of the adapter's two files: the same name reloaded from other files gets another
    fingerprint, so nothing cached for the old one serves the new one."""
    h = hashlib.sha256()
    for name in ADAPTER_FILES:
        with open(directory / name, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()[:16]


def load_layout(
    name: str,
    path: str,
    find_repo: Callable[[str], Path],
    linears: Optional[dict[str, tuple[int, int]]] = None,
    model_id: str = "",
    max_rank: int = 64,
) -> AdapterLayout:
    """An adapter found, read and (given the model's linear layers) checked to fit."""
    layout = read_layout(name, resolve_directory(name, path, find_repo))
    if linears is not None:
        check_fits(layout, linears, model_id, max_rank)
    return layout
