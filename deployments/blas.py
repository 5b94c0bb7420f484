"""Which BLAS MLX's CPU backend multiplies with on Linux.

The `mlx[cpu]` wheel bundles the Netlib reference BLAS: one thread, about 5 GFLOP/s on the
project's 2-core machine, and every matrix product of every slot (LLM, Whisper, TTS, FLUX) goes
through it. OpenBLAS exports the same `cblas_*` symbols; opened into the process's global
symbol scope before MLX's library loads, the dynamic linker binds MLX's calls to it instead
(35x on a 640x2560 product there, results identical for every batch size tried).

OpenBLAS's runtime CPU detection does not know every CPU: 0.3.21 (Debian 12) on this project's
Xeon (Sapphire Rapids, AVX-512) picks "Prescott", its SSE3 kernels, and every float32 product is
~4.7x slower than it needs to be (a 1500x384x1536 product: 76 ms of CPU vs 16 ms). So unless
`OPENBLAS_CORETYPE` is set, it is set from the CPU's instruction-set flags before OpenBLAS loads:
`SkylakeX` (its AVX-512 kernels) when the CPU has AVX-512 F/BW/CD/DQ/VL, `Haswell` (AVX2+FMA)
otherwise when it has those; a build without DYNAMIC_ARCH ignores the variable.

`OMINIX_BLAS` chooses: `auto` (the default: the system OpenBLAS when one is installed, else
Intel's oneMKL from the `mkl` wheel when it is in this environment, else the bundled one),
`reference` (keep the wheel's), or the path of a library with the cblas symbols.

A BLAS from PyPI, for a machine where no system package can be installed (no root, no sudo):
the `mkl` wheel (pyproject.toml's `blas-wheel` extra, which `make setup` installs only then,
deployments/system_deps.py) exports the plain `cblas_*` names and binds the same way. A
1024x1024 float32 product in MLX on one thread of the project's Xeon: 412 ms on the reference
BLAS, 14.3 ms on Debian's OpenBLAS 0.3.21, 13.1 ms on mkl 2026.2 (its sequential layer, so it
needs neither intel-openmp nor tbb). It is second to OpenBLAS because it is 220 MB to download
(650 MB installed), x86-64 only, and under Intel's Simplified Software License, not open
source. The OpenBLAS wheels do not bind: scipy-openblas32 exports its functions renamed
(`scipy_cblas_sgemm`), and numpy's bundled copy too (`scipy_cblas_sgemm64_`, 64-bit integers),
so MLX's calls to `cblas_sgemm` never reach them without a C shim.

On the reference BLAS, `select()` logs a WARNING with the cost and the fix (`slow_warning`), and
every replica reports its choice to Control (`/v1/version`, `/readyz`, `make status`).
OpenBLAS gets one thread per process (`OPENBLAS_NUM_THREADS=1` unless set): the graph's
replicas are processes that share the cores through the OS scheduler, and OpenBLAS's threaded
GEMM collapses when one of its threads is descheduled mid-product (its threads wait for each
other). Measured on the 2-core box at load average 17, one Whisper tiny.en window: 1.8-2.0 s
with one thread, 1.5 s with two when the machine happened to be free and 7.5-14.3 s when it
was not. `OPENBLAS_NUM_THREADS`, when set, still wins (a lone big replica on a quiet machine,
docs/linux-openblas.md).

Pure standard library, and it must run before anything imports `mlx.core`: every slot replica
calls `select()` first thing (deployments/slot_replica.py), and the engines import MLX lazily,
so the ingress, Control and the CUDA proxy never load a BLAS. Tools that run engines in process
(bench/, the tests' conftest) call it themselves.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, Optional

logger = logging.getLogger(__name__)

ENV = "OMINIX_BLAS"
THREADS_ENV = "OPENBLAS_NUM_THREADS"
CORETYPE_ENV = "OPENBLAS_CORETYPE"
# OpenBLAS kernel families by the instruction sets they need, best first.
_CORETYPES = (
    ("SkylakeX", frozenset({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"})),
    ("Haswell", frozenset({"avx2", "fma"})),
)
REFERENCE = "reference"
MKL_THREADING_ENV = "MKL_THREADING_LAYER"
# The fix a WARNING names when MLX multiplies with the reference BLAS.
FIX = (
    "`make setup` (installs libopenblas0-pthread as root or with passwordless sudo, else the mkl wheel "
    "into .venv), or `sudo apt-get install libopenblas0-pthread` (Fedora: `sudo dnf install openblas`)"
)
DEFAULT_THREADS = 1  # per process: replicas share the cores as processes (see above)
# Where distributions put OpenBLAS; the threaded builds first.
_SEARCH = (
    "/usr/lib/*-linux-gnu/openblas-pthread/libopenblas.so*",
    "/usr/lib/*-linux-gnu/openblas-openmp/libopenblas.so*",
    "/usr/lib/*-linux-gnu/libopenblas.so*",
    "/usr/lib64/libopenblas.so*",
    "/usr/lib/libopenblas.so*",
    "/usr/local/lib/libopenblas.so*",
    "/opt/homebrew/opt/openblas/lib/libopenblas.so*",
)
_REQUIRED_SYMBOLS = ("cblas_sgemm", "cblas_sgemv")


def _wheel_search() -> tuple[str, ...]:
    """Where the `mkl` wheel puts its runtime library: the environment's lib/ (its data files)."""
    return (os.path.join(sys.prefix, "lib", "libmkl_rt.so*"),)


@dataclass(frozen=True)
class BlasChoice:
    library: str  # a path, or "reference" for the wheel's bundled BLAS
    reason: str
    threads: Optional[int] = None  # OpenBLAS's thread count (the reference BLAS has one)
    core: Optional[str] = None  # the kernels OpenBLAS runs (openblas_get_corename)

    @property
    def kind(self) -> str:
        """ "openblas", "mkl", "reference", or "other" (a library named by OMINIX_BLAS)."""
        if self.library == REFERENCE:
            return REFERENCE
        name = os.path.basename(self.library)
        return "mkl" if "mkl" in name else "openblas" if "openblas" in name else "other"

    def as_dict(self) -> dict[str, Any]:
        return {
            "library": self.library,
            "kind": self.kind,
            "reason": self.reason,
            "threads": self.threads,
            "core": self.core,
        }


_chosen: Optional[BlasChoice] = None


def select(setting: Optional[str] = None) -> BlasChoice:
    """Load the BLAS `setting` (default: $OMINIX_BLAS, else "auto") asks for, once per process."""
    global _chosen
    if _chosen is None:
        _chosen = _select((setting or os.environ.get(ENV) or "auto").strip())
        warning = slow_warning(_chosen)
        if warning:
            logger.warning(warning)
        elif _chosen.library != REFERENCE:
            logger.info(
                "MLX CPU matrix products use %s (%s, %s threads, %s kernels)",
                _chosen.library,
                _chosen.reason,
                _chosen.threads,
                _chosen.core,
            )
    return _chosen


def slow_warning(choice: BlasChoice) -> Optional[str]:
    """What to tell an operator whose MLX multiplies with the reference BLAS on Linux without
    having asked for it: the cost and the fix. None otherwise."""
    if choice.library != REFERENCE or not sys.platform.startswith("linux") or choice.reason == f"{ENV}=reference":
        return None
    return (
        f"MLX's CPU matrix products use the reference BLAS bundled with its wheel ({choice.reason}): about 30x "
        f"slower than OpenBLAS (the README's Kokoro example takes ~60 s instead of ~2 s). Fix: {FIX}, then restart"
    )


def _select(setting: str) -> BlasChoice:
    if not sys.platform.startswith("linux"):
        return BlasChoice(REFERENCE, "not Linux: MLX uses Metal and Accelerate")
    if setting.lower() == REFERENCE:
        return BlasChoice(REFERENCE, f"{ENV}=reference")
    if "mlx.core" in sys.modules:
        return BlasChoice(REFERENCE, "mlx was imported before ominix-serve chose a BLAS")
    # Read by OpenBLAS once, when it loads: set before any candidate is opened.
    os.environ.setdefault(THREADS_ENV, str(DEFAULT_THREADS))
    # The mkl wheel is installed without intel-openmp and tbb: its one-thread layer needs neither.
    os.environ.setdefault(MKL_THREADING_ENV, "SEQUENTIAL")
    core = coretype(cpu_flags())
    if core:
        os.environ.setdefault(CORETYPE_ENV, core)
    if setting.lower() != "auto":
        error = _open_global(setting)
        if error:
            raise RuntimeError(f"{ENV}={setting}: {error}")
        return BlasChoice(setting, f"{ENV} names it", _threads(setting), _core(setting))
    for path in candidates():
        if _open_global(path) is None:
            return BlasChoice(path, "system OpenBLAS found", _threads(path), _core(path))
    for path in wheel_candidates():
        if _open_global(path) is None:
            return BlasChoice(path, "no system OpenBLAS; the mkl wheel", _threads(path))
    return BlasChoice(REFERENCE, "no OpenBLAS or MKL found")


def candidates() -> list[str]:
    """OpenBLAS libraries on this machine, best first."""
    found = [path for pattern in _SEARCH for path in sorted(glob.glob(pattern))]
    by_name = ctypes.util.find_library("openblas")
    if by_name:
        found.append(by_name)
    return list(dict.fromkeys(found))


def wheel_candidates() -> list[str]:
    """BLAS libraries a PyPI wheel installed into this Python environment (the mkl wheel)."""
    return [path for pattern in _wheel_search() for path in sorted(glob.glob(pattern))]


def _threads(path: str) -> Optional[int]:
    library = ctypes.CDLL(path)
    for name in ("openblas_get_num_threads", "mkl_get_max_threads"):
        get = getattr(library, name, None)
        if get is not None:
            return int(get())
    return None


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The instruction-set flags of the first CPU in /proc/cpuinfo (empty when unreadable)."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def coretype(flags: frozenset[str]) -> Optional[str]:
    """The OpenBLAS kernel family (OPENBLAS_CORETYPE) a CPU with these flags runs best, if any."""
    for name, needs in _CORETYPES:
        if needs <= flags:
            return name
    return None


def _core(path: str) -> Optional[str]:
    get = getattr(ctypes.CDLL(path), "openblas_get_corename", None)
    if get is None:
        return None
    get.restype = ctypes.c_char_p
    return get().decode()


def _open_global(path: str) -> Optional[str]:
    """Open `path` into the global symbol scope if it has the cblas symbols; else say why not."""
    try:
        library = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    except OSError as e:
        return f"cannot be opened ({e})"
    missing = [name for name in _REQUIRED_SYMBOLS if not hasattr(library, name)]
    if missing:
        return f"has no {', '.join(missing)}"
    # The same library opened again with RTLD_GLOBAL: its symbols now resolve other libraries'.
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    return None


def subprocess_env(choice: BlasChoice) -> dict[str, str]:
    """Environment for a child process (a peer server) to multiply with the same library."""
    env = dict(os.environ)
    if choice.library != REFERENCE:
        env["LD_PRELOAD"] = " ".join(filter(None, [choice.library, env.get("LD_PRELOAD")]))
    return env
