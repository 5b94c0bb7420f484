"""Which MLX build a Linux machine installs (the CPU one, or MLX's CUDA build for an NVIDIA GPU),
and which backend and device a process's MLX runs on.

MLX ships one Python binding (`mlx`) and one native build per backend, each its own wheel of
the binding's version: `mlx-cpu` (pyproject.toml's `mlx[cpu]`, what `pip install` gives on
Linux), `mlx-cuda-12` and `mlx-cuda-13` (`mlx[cuda12]`, `mlx[cuda13]`: NVIDIA GPUs, x86-64 and
aarch64), `mlx-metal` on macOS. The Linux builds write the same files (`mlx/lib/libmlx.so`,
`mlx/include/`, `mlx/share/`; only their bundled-library folders, `<name>.libs`, differ), so
one of them at a time: uninstalling a second build after installing the first would delete the
first's `libmlx.so`. `make setup` runs `python -m deployments.accelerator setup`, which:

- keeps `mlx-cpu` and says nothing on a machine without an NVIDIA driver (and does nothing
  off Linux: pip gives macOS its Metal build);
- on a driver whose CUDA version (the header of `nvidia-smi`) is 13.0 or later chooses
  `mlx-cuda-13`; 12.x with a driver of at least 550.54.14 (MLX's documented minimum for its
  CUDA 12 build) `mlx-cuda-12`; an older driver, or GPUs all below compute capability 7.5 (the
  oldest MLX's CUDA backend supports), keep `mlx-cpu`, with one line saying why;
- `OMINIX_MLX_BUILD=cpu|cuda12|cuda13` overrides the choice (`auto`, the default, detects);
- swaps: fetches the chosen build at the binding's version and installs it with its NVIDIA
  libraries from PyPI over the installed one, then uninstalls the others and puts the chosen
  build's files back from the fetched wheel, offline (`swap_plan`); whatever needs the network
  comes first, so a machine that cannot reach PyPI keeps the build it has.

The detection, the choice and the swap's pip commands are pure functions of what nvidia-smi
and /proc say, tested with a faked driver (tests/unit/test_accelerator.py). The CUDA path has
not run on a GPU from this repository's CI (docs/nvidia.md).

At run time `runtime()` says what a replica's MLX runs on (backend `cuda`, `metal` or `cpu`,
the default device and its name, the installed build); every slot replica reports it to
Control beside its BLAS (deployments/control/agent.py), and /readyz, /v1/version and `make
status` show it per slot. `on_cpu_backend()` is the one gate of the CPU-only paths (the LLM's
float32 dtype policy and numpy prefill attention, Whisper's float32, compile off for mflux): a
CUDA device is a GPU as Metal is, so those gates test for the CPU, never for "not Metal".

Pure standard library but `runtime()` and `on_cpu_backend()`, which import MLX (a replica
calls them after deployments/blas.py chose a BLAS).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any, Optional

ENV = "OMINIX_MLX_BUILD"
CPU, CUDA12, CUDA13, METAL = "cpu", "cuda12", "cuda13", "metal"
# The Linux builds, by what `OMINIX_MLX_BUILD` and the choice call them.
PACKAGES = {CPU: "mlx-cpu", CUDA12: "mlx-cuda-12", CUDA13: "mlx-cuda-13"}
BUILDS = {**PACKAGES, METAL: "mlx-metal"}  # every build a process may report (macOS: mlx-metal)
MACHINES = ("x86_64", "aarch64")  # the Linux machines MLX's CUDA wheels are built for
MIN_COMPUTE = (7, 5)  # MLX's CUDA backend: Turing (SM 7.5) and later
MIN_CUDA12_DRIVER = (550, 54, 14)  # MLX's documented minimum driver for mlx-cuda-12
PROC_VERSION = "/proc/driver/nvidia/version"
PREFIX = "MLX build:"


# ---------------------------------------------------------------------------- the driver


@dataclass(frozen=True)
class Gpu:
    name: str
    compute: Optional[tuple[int, int]]  # compute capability, e.g. (9, 0); None when not reported


@dataclass(frozen=True)
class Driver:
    """What the NVIDIA driver says of itself: its version, the highest CUDA version it runs,
    its GPUs."""

    version: Optional[str]  # e.g. "580.159.03"
    cuda: Optional[tuple[int, int]]  # e.g. (13, 0): nvidia-smi's "CUDA Version"
    gpus: tuple[Gpu, ...] = ()

    def describe(self) -> str:
        parts = [f"NVIDIA driver {self.version or '(version unknown)'}"]
        if self.cuda:
            parts.append(f"CUDA {_dotted(self.cuda)}")
        parts += [f"{g.name} (SM {_dotted(g.compute)})" if g.compute else g.name for g in self.gpus]
        return ", ".join(parts)


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(str(n) for n in version)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in text.split("."))


def parse_cuda_version(smi: str) -> Optional[tuple[int, int]]:
    """The CUDA version in nvidia-smi's header ("CUDA Version: 12.8")."""
    m = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", smi)
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse_driver_version(text: str) -> Optional[str]:
    """The driver's version in /proc/driver/nvidia/version ("... Kernel Module  550.54.14 ...",
    or "... Open Kernel Module for x86_64  580.159.03 ...") or nvidia-smi's header
    ("Driver Version: 550.54.14")."""
    m = re.search(r"(?:Kernel Module(?: for \S+)?|Driver Version:)\s+(\d+(?:\.\d+)+)", text)
    return m.group(1) if m else None


def parse_gpus(csv: str) -> tuple[Gpu, ...]:
    """`nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader`: one "name, 9.0" a GPU
    (an older nvidia-smi without compute_cap answers no lines)."""
    gpus = []
    for line in csv.splitlines():
        name, _, cap = line.rpartition(",")
        if not name.strip():
            continue
        m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", cap)
        gpus.append(Gpu(name.strip(), (int(m.group(1)), int(m.group(2))) if m else None))
    return tuple(gpus)


def nvidia_smi(args: list[str]) -> Optional[str]:
    """nvidia-smi's output, or None when it is not there or fails (no driver loaded)."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def read_text(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def detect_driver(
    smi: Callable[[list[str]], Optional[str]] = nvidia_smi,
    read: Callable[[str], Optional[str]] = read_text,
) -> Optional[Driver]:
    """The NVIDIA driver of this machine, or None when there is none."""
    proc = read(PROC_VERSION)
    header = smi([])
    if proc is None and header is None:
        return None
    version = parse_driver_version(proc or "") or parse_driver_version(header or "")
    gpus = parse_gpus(smi(["--query-gpu=name,compute_cap", "--format=csv,noheader"]) or "")
    return Driver(version, parse_cuda_version(header or ""), gpus)


# ---------------------------------------------------------------------------- the choice


@dataclass(frozen=True)
class Choice:
    build: str  # cpu, cuda12, cuda13, or metal (not Linux: nothing to install)
    reason: str
    quiet: bool = False  # nothing worth a line at setup (no driver: the CPU build, as always)

    @property
    def package(self) -> Optional[str]:
        return PACKAGES.get(self.build)


def choose(system: str, machine: str, driver: Optional[Driver], setting: str = "auto") -> Choice:
    """The MLX build for this machine, and why."""
    if not system.startswith("linux"):
        return Choice(METAL, "not Linux: pip installs MLX's own build (Metal on macOS)", quiet=True)
    setting = (setting or "auto").strip().lower()
    if setting in PACKAGES:
        return Choice(setting, f"{ENV}={setting}")
    if setting != "auto":
        return Choice(CPU, f"{ENV}={setting} is not one of auto, {', '.join(PACKAGES)}: keeping the CPU build")
    if driver is None:
        return Choice(CPU, "no NVIDIA driver", quiet=True)
    found = driver.describe()
    if machine not in MACHINES:
        return Choice(CPU, f"{found}, but MLX's CUDA wheels are built for {' and '.join(MACHINES)} only")
    known = [g for g in driver.gpus if g.compute is not None]
    if known and all(g.compute < MIN_COMPUTE for g in known):
        return Choice(CPU, f"{found}: MLX's CUDA backend needs compute capability {_dotted(MIN_COMPUTE)} or later")
    if driver.cuda is None:
        return Choice(CPU, f"{found}: nvidia-smi did not say which CUDA version the driver runs")
    if driver.cuda >= (13, 0):
        return Choice(CUDA13, found)
    if driver.cuda >= (12, 0) and (driver.version is None or _version(driver.version) >= MIN_CUDA12_DRIVER):
        return Choice(CUDA12, found)
    return Choice(
        CPU,
        f"{found}: MLX's CUDA build needs driver {_dotted(MIN_CUDA12_DRIVER)} (CUDA 12) or later; update the driver",
    )


# ---------------------------------------------------------------------------- the swap


def installed_builds(version: Callable[[str], str] = importlib.metadata.version) -> dict[str, str]:
    """The MLX builds installed in this environment: build -> version."""
    found = {}
    for build, package in BUILDS.items():
        try:
            found[build] = version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def swap_plan(
    chosen: Choice, installed: Mapping[str, str], mlx_version: Optional[str], wheel_dir: str
) -> list[list[str]]:
    """The pip arguments, run in order until one fails, that leave exactly the chosen build at
    the binding's version installed. Everything that needs the network comes first, while the
    environment still has its build: the chosen wheel into `wheel_dir`, then the chosen build
    with its dependencies (its NVIDIA libraries) over the installed one. Then the others out:
    uninstalling one deletes the files it shares with the chosen build (`mlx/lib/libmlx.so`),
    so the chosen build's files go back last, from `wheel_dir`, offline. Empty when there is
    nothing to do."""
    if chosen.package is None or mlx_version is None:
        return []
    others = [PACKAGES[build] for build in installed if build != chosen.build and build in PACKAGES]
    present = installed.get(chosen.build) == mlx_version
    if present and not others:
        return []
    requirement = f"{chosen.package}=={mlx_version}"
    steps = [["download", "--no-deps", "--dest", wheel_dir, requirement]]
    if not present:
        steps.append(["install", requirement])
    if others:
        steps.append(["uninstall", "--yes", *others])
        steps.append(
            ["install", "--no-deps", "--force-reinstall", "--no-index", "--find-links", wheel_dir, requirement]
        )
    return steps


def say_now(line: str) -> None:
    print(line, flush=True)  # before the output of the pip it runs next


def run_pip(args: list[str]) -> bool:
    """pip in this environment (the .venv `make setup` runs in)."""
    say_now(f"{PREFIX} pip {' '.join(args)}")
    return subprocess.run([sys.executable, "-m", "pip", "--quiet", *args]).returncode == 0


def mlx_binding_version(version: Callable[[str], str] = importlib.metadata.version) -> Optional[str]:
    try:
        return version("mlx")
    except importlib.metadata.PackageNotFoundError:
        return None


def setup(
    chosen: Choice,
    installed: Callable[[], Mapping[str, str]] = installed_builds,
    mlx_version: Optional[str] = None,
    pip: Callable[[list[str]], bool] = run_pip,
    say: Callable[[str], None] = say_now,
) -> None:
    """`make setup`'s step: install the `chosen` build at the binding's version. Never fails
    setup: a build that cannot be fetched (no network to PyPI) leaves the installed one."""
    with tempfile.TemporaryDirectory(prefix="ominix-mlx-build-") as wheel_dir:
        steps = swap_plan(chosen, installed(), mlx_version, wheel_dir)
        if not steps:
            if not chosen.quiet and chosen.build == CPU:
                say(f"{PREFIX} keeping {PACKAGES[CPU]} ({chosen.reason})")
            return
        say(f"{PREFIX} installing {chosen.package}=={mlx_version} ({chosen.reason})")
        if not all(pip(step) for step in steps):  # stops at the first that fails
            kept = installed_build(installed()) or "no MLX build"
            say(f"{PREFIX} {chosen.package} could not be installed; {kept} stays")


# ---------------------------------------------------------------------------- at run time


@dataclass(frozen=True)
class Backend:
    """What a process's MLX runs on."""

    backend: str  # "cuda", "metal" or "cpu"
    device: str  # MLX's default device: "gpu" or "cpu"
    device_name: Optional[str]  # e.g. "NVIDIA H200", "Apple M3 Max", the CPU's name
    cuda: bool  # mx.cuda.is_available()
    metal: bool  # mx.metal.is_available()
    build: Optional[str]  # the MLX build installed, e.g. "mlx-cuda-13 0.32.4" or "mlx-metal 0.32.4"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def label(backend: Mapping[str, Any]) -> str:
    """A reported backend (`Backend.as_dict()`) in a few words, e.g. "cuda (NVIDIA H200)": the
    backend and the default device's name, for /readyz, `make status` and the start-up log."""
    name = backend.get("device_name")
    return f"{backend.get('backend', '?')} ({name})" if name else str(backend.get("backend", "?"))


def backend_of(device: str, cuda: bool, metal: bool, info: Mapping[str, Any], build: Optional[str]) -> Backend:
    """The backend MLX computes with: the default device's, CUDA or Metal when it is the GPU."""
    name = "cpu" if device != "gpu" else "cuda" if cuda else "metal" if metal else "gpu"
    return Backend(name, device, info.get("device_name"), cuda, metal, build)


def installed_build(installed: Mapping[str, str]) -> Optional[str]:
    return ", ".join(f"{BUILDS[b]} {v}" for b, v in installed.items()) or None


@cache
def runtime() -> Backend:
    """What this process's MLX runs on (imports MLX: call it after deployments/blas.py's select)."""
    import mlx.core as mx

    device = mx.default_device()
    kind = "gpu" if device.type == mx.DeviceType.gpu else "cpu"
    try:
        info = mx.device_info(device)
    except Exception:  # a backend that does not describe its device: the rest still holds
        info = {}
    return backend_of(kind, mx.cuda.is_available(), mx.metal.is_available(), info, installed_build(installed_builds()))


def on_cpu_backend() -> bool:
    """Whether MLX computes on the CPU here: the gate of every CPU-only path (a CUDA GPU, like
    Metal, is not one)."""
    import mlx.core as mx

    return mx.default_device().type == mx.DeviceType.cpu


def main(argv: list[str]) -> int:
    if argv not in (["setup"], ["show"]):
        print("usage: python -m deployments.accelerator {setup|show}", file=sys.stderr)
        return 2
    driver = detect_driver()
    chosen = choose(sys.platform, platform.machine(), driver, os.environ.get(ENV, "auto"))
    if argv == ["setup"]:
        setup(chosen, mlx_version=mlx_binding_version())
        return 0
    print(f"driver: {driver.describe() if driver else 'none'}")
    print(f"chosen: {chosen.package or chosen.build} ({chosen.reason})")
    print(f"installed: {installed_build(installed_builds()) or 'none of ' + ', '.join(PACKAGES.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
