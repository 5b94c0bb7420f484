"""The system packages ominix-serve uses, which of them are missing, and how to get them: the
step `make setup` (runtime needs) and `make test` (test needs) run, and the check a replica
makes at start so that a missing one is named, never a silent degradation.

Runtime: OpenBLAS (MLX's CPU matrix products, deployments/blas.py), ffmpeg (audio other than
WAV/FLAC/OGG/MP3: ASR uploads, TTS `aac`, deployments/audio/), npm (`make setup` fetches
Kokoro's voices with it, deployments/tts/kokoro.py). Tests: espeak-ng (real speech,
tests/speech.py), chromium (the demo page's browser test), Prometheus (the metrics test).
Kokoro's G2P brings its own espeak-ng library (the espeakng_loader wheel): the system one
serves the tests only.

`python -m deployments.system_deps runtime|test|all` installs what is missing with apt-get (or
dnf) when it runs as root or with passwordless sudo, else prints one line per missing package
with the command to run. It never fails the step that called it: every package here is
optional to what follows (the replica says what it lacks). Where no OpenBLAS can be installed,
the runtime step installs the mkl wheel (pyproject.toml's `blas-wheel` extra) into the running
virtual environment instead, which deployments/blas.py binds the same way.

Pure standard library: it runs on a machine where little else is installed.
"""

from __future__ import annotations

import os
import platform
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from deployments import blas

RUNTIME, TEST = "runtime", "test"
GROUPS = {RUNTIME: (RUNTIME,), TEST: (TEST,), "all": (RUNTIME, TEST)}
OPENBLAS = "libopenblas0-pthread"
PREFIX = "system packages:"


@dataclass(frozen=True)
class Package:
    name: str  # Debian's name, the one messages show
    group: str
    purpose: str  # what goes wrong without it
    commands: tuple[str, ...] = ()  # present when one of these is on PATH
    dnf: Optional[str] = None  # Fedora's name, where it has one


PACKAGES = (
    Package(OPENBLAS, RUNTIME, "MLX's CPU matrix products are about 30x slower on the reference BLAS", dnf="openblas"),
    Package(
        "ffmpeg",
        RUNTIME,
        "audio uploads other than WAV/FLAC/OGG/MP3 and TTS response_format aac are refused (400)",
        commands=("ffmpeg",),
        dnf="ffmpeg-free",
    ),
    Package("npm", RUNTIME, "`make setup` cannot fetch Kokoro's voices", commands=("npm",), dnf="npm"),
    Package("espeak-ng", TEST, "the audio tests have no real speech", commands=("espeak-ng",), dnf="espeak-ng"),
    Package(
        "chromium",
        TEST,
        "the demo page's browser test cannot run",
        commands=("chromium", "chromium-browser"),
        dnf="chromium",
    ),
    Package("prometheus", TEST, "the metrics test has no Prometheus server", commands=("prometheus",)),
)
BY_NAME = {package.name: package for package in PACKAGES}


@dataclass(frozen=True)
class Plan:
    """What to do about the missing packages: commands to run here, or lines to print."""

    run: list[list[str]] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)


def fast_blas_libraries() -> list[str]:
    """OpenBLAS on the system, else the mkl wheel in this environment: either does (blas.py)."""
    return blas.candidates() or blas.wheel_candidates()


def is_present(
    package: Package,
    which: Callable[[str], Optional[str]] = shutil.which,
    libraries: Callable[[], list[str]] = fast_blas_libraries,
) -> bool:
    if package.name == OPENBLAS:
        return bool(libraries())
    return any(which(command) for command in package.commands)


def missing(groups: Iterable[str], present: Optional[Callable[[Package], bool]] = None) -> list[Package]:
    wanted, present = set(groups), present or is_present
    return [package for package in PACKAGES if package.group in wanted and not present(package)]


def hint(package: Package, manager: Optional[str]) -> str:
    """One line: what is missing, what that costs, what to run."""
    if manager == "dnf" and package.dnf:
        command = f"`sudo dnf install {package.dnf}`"
    elif manager == "dnf" or manager is None:
        command = f"your system's package for {package.name} (Debian: `sudo apt-get install {package.name}`)"
    else:
        command = f"`sudo apt-get install {package.name}`"
    return f"{PREFIX} {package.name} is missing: {package.purpose}. Install it: {command}"


def plan(packages: list[Package], manager: Optional[str], is_root: bool, has_sudo: bool) -> Plan:
    """apt-get or dnf as root or through passwordless sudo; else one hint per package."""
    if not packages:
        return Plan()
    names = [p.name if manager == "apt-get" else p.dnf for p in packages]
    if manager is None or (not is_root and not has_sudo):
        return Plan(hints=[hint(p, manager) for p in packages])
    unnamed = [p for p, name in zip(packages, names) if name is None]
    names = [name for name in names if name]
    prefix = [] if is_root else ["sudo", "-n"]
    if manager == "apt-get":
        apt = [*prefix, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]
        run = [[*apt, "update", "-qq"], [*apt, "install", "-y", "-qq", *names]]
    else:
        run = [[*prefix, "dnf", "install", "-y", "-q", *names]]
    return Plan(run=run if names else [], hints=[hint(p, manager) for p in unnamed])


def package_manager(which: Callable[[str], Optional[str]] = shutil.which) -> Optional[str]:
    return next((manager for manager in ("apt-get", "dnf") if which(manager)), None)


def passwordless_sudo() -> bool:
    if not shutil.which("sudo"):
        return False
    try:
        return subprocess.run(["sudo", "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def wheel_blas_requirement(pyproject: Path = Path(__file__).resolve().parents[1] / "pyproject.toml") -> Optional[str]:
    """The `blas-wheel` extra's requirement (the pinned mkl wheel), from the source tree."""
    import tomllib

    try:
        extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return None
    return next(iter(extras.get("blas-wheel", [])), None)


def wants_wheel_blas(openblas_missing: bool, system: str, machine: str, in_venv: bool) -> bool:
    """The mkl wheel goes in only where it is the one fast BLAS to be had: no system OpenBLAS
    after the install step, Linux x86-64 (the only platform it ships for), a virtual
    environment to put it in (never the system Python). Once there, OpenBLAS counts as
    present (`fast_blas_libraries`), so it is installed once."""
    return openblas_missing and system.startswith("linux") and machine == "x86_64" and in_venv


def replica_warnings(tools: Iterable[str], which: Callable[[str], Optional[str]] = shutil.which) -> list[str]:
    """One line per system tool `tools` names that this process cannot find, with the fix."""
    return [hint(BY_NAME[tool], package_manager(which)) for tool in tools if not is_present(BY_NAME[tool], which)]


def _run(command: list[str]) -> bool:
    print(f"{PREFIX} {shlex.join(command)}", flush=True)
    try:
        return subprocess.run(command, timeout=1800).returncode == 0
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"{PREFIX} {command[0]} failed: {e}", flush=True)
        return False


def install(groups: Iterable[str]) -> list[Package]:
    """Install what is missing where it can; return what is still missing."""
    groups = list(groups)
    todo = missing(groups)
    manager = package_manager()
    is_root = hasattr(os, "geteuid") and os.geteuid() == 0
    steps = plan(todo, manager, is_root, not is_root and bool(todo) and passwordless_sudo())
    if steps.run and not all(_run(command) for command in steps.run) and len(todo) > 1:
        # apt-get installs all or nothing: one package it cannot have (npm beside NodeSource's
        # nodejs, chromium where it is a snap) must not keep the others out.
        for package in missing(groups):
            alone = plan([package], manager, is_root, True).run
            if alone:
                _run(alone[-1])
    still = missing(groups)
    for line in steps.hints + ([hint(p, manager) for p in still] if steps.run else []):
        print(line, flush=True)
    return still


def install_wheel_blas() -> None:
    requirement = wheel_blas_requirement()
    if requirement is None:
        return
    print(
        f"{PREFIX} no system OpenBLAS: installing {requirement.split(';')[0]} (Intel oneMKL, ~220 MB) into {sys.prefix}"
    )
    _run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", requirement])


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in GROUPS:
        print(f"usage: python -m deployments.system_deps {{{'|'.join(GROUPS)}}}", file=sys.stderr)
        return 2
    still = install(GROUPS[argv[0]])
    openblas_missing = any(p.name == OPENBLAS for p in still)
    in_venv = sys.prefix != sys.base_prefix
    if wants_wheel_blas(openblas_missing, sys.platform, platform.machine(), in_venv):
        install_wheel_blas()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
