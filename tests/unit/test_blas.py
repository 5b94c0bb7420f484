"""The BLAS MLX multiplies with on Linux (deployments/blas.py): the system OpenBLAS when it is
installed, bound before MLX loads; the bundled reference one on request; clear errors.

Each case runs in a fresh interpreter, doing what a slot replica does first (blas.select(),
deployments/slot_replica.py): the choice is made once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from deployments import blas

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the BLAS choice is Linux-only")

# Prints the choice, the OpenBLAS files mapped into the process (numpy maps its own, renamed
# copy), and checks a product.
PROBE = """
import json, sys
{before}
from deployments import blas
blas.select()
import mlx.core as mx, numpy as np
a = np.random.default_rng(0).standard_normal((64, 96)).astype(np.float32)
b = np.random.default_rng(1).standard_normal((96, 48)).astype(np.float32)
product = np.array(mx.array(a) @ mx.array(b))
mapped = sorted({{line.split()[-1] for line in open("/proc/self/maps") if "openblas" in line}})
print(json.dumps({{**blas.select().as_dict(), "mapped": mapped,
                  "max_error": float(np.abs(product - a @ b).max())}}))
"""


def _probe(env: dict[str, str], before: str = "", unset: tuple[str, ...] = ()) -> dict:
    child_env = {k: v for k, v in {**os.environ, **env}.items() if k not in unset}
    run = subprocess.run(
        [sys.executable, "-c", PROBE.format(before=before)],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if run.returncode != 0:
        raise RuntimeError(run.stderr)
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def openblas():
    found = blas.candidates()
    if not found:
        if os.environ.get("CI"):
            pytest.fail("CI installs libopenblas0-pthread (.ci/run), but no OpenBLAS was found")
        pytest.skip("no system OpenBLAS (apt install libopenblas0-pthread)")
    return found[0]


def test_auto_binds_mlx_to_the_system_openblas(openblas):
    probe = _probe({blas.ENV: "auto"})
    assert probe["library"] == openblas and os.path.realpath(openblas) in probe["mapped"]
    assert probe["max_error"] < 1e-3


def test_reference_keeps_the_bundled_blas():
    probe = _probe({blas.ENV: "reference"})
    assert probe["library"] == blas.REFERENCE
    assert not any(os.path.realpath(path) in probe["mapped"] for path in blas.candidates())
    assert probe["max_error"] < 1e-3


def test_a_named_library_is_used(openblas):
    probe = _probe({blas.ENV: openblas})
    assert probe["library"] == openblas and os.path.realpath(openblas) in probe["mapped"]


def test_one_thread_per_process_whatever_rays_share(openblas):
    """Replicas share the cores as processes; OpenBLAS's threaded GEMM collapses when its
    threads are descheduled (deployments/blas.py), so one thread unless told otherwise."""
    probe = _probe({blas.ENV: "auto", "OMP_NUM_THREADS": "4"}, unset=(blas.THREADS_ENV,))
    assert probe["threads"] == blas.DEFAULT_THREADS == 1


def test_an_explicit_thread_count_wins(openblas):
    probe = _probe({blas.ENV: "auto", blas.THREADS_ENV: "2"})
    assert probe["threads"] == 2


def test_mlx_imported_first_is_reported_not_hidden():
    probe = _probe({blas.ENV: "auto"}, before="import mlx.core")
    assert probe["library"] == blas.REFERENCE and "imported before" in probe["reason"]


@pytest.mark.parametrize(
    "setting, message",
    [
        ("/nonexistent/libopenblas.so.0", "cannot be opened"),
        ("libm.so.6", "has no cblas_sgemm"),
    ],
)
def test_a_wrong_library_stops_the_process_with_the_reason(setting, message):
    with pytest.raises(RuntimeError) as e:
        _probe({blas.ENV: setting})
    assert f"{blas.ENV}={setting}" in str(e.value) and message in str(e.value)


def test_a_child_process_gets_the_same_library_preloaded():
    choice = blas.BlasChoice("/usr/lib/libopenblas.so.0", "test")
    assert blas.subprocess_env(choice)["LD_PRELOAD"].split()[0] == "/usr/lib/libopenblas.so.0"
    unchanged = blas.subprocess_env(blas.BlasChoice(blas.REFERENCE, "test"))
    assert unchanged.get("LD_PRELOAD") == os.environ.get("LD_PRELOAD")


def test_openblas_kernels_follow_the_cpus_instruction_sets(tmp_path):
    """OpenBLAS 0.3.21 calls this project's AVX-512 Xeon "Prescott" (SSE3 kernels, ~4.7x slower
    products): the kernel family is chosen from /proc/cpuinfo's flags instead."""
    avx512 = "fpu sse2 avx avx2 fma avx512f avx512dq avx512cd avx512bw avx512vl"
    assert blas.coretype(frozenset(avx512.split())) == "SkylakeX"
    assert blas.coretype(frozenset("sse2 avx avx2 fma avx512f".split())) == "Haswell"  # partial AVX-512
    assert blas.coretype(frozenset("sse2 sse3 avx".split())) is None  # OpenBLAS's own detection
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nflags\t\t: {avx512}\n\nprocessor\t: 1\nflags\t\t: sse2\n")
    assert blas.cpu_flags(str(info)) == frozenset(avx512.split())
    assert blas.cpu_flags(str(tmp_path / "missing")) == frozenset()


def test_coretype_set_before_openblas_loads_unless_given(openblas):
    core = blas.coretype(blas.cpu_flags())
    if core is None:
        pytest.skip("this CPU has neither AVX2+FMA nor AVX-512")
    assert _probe({}, unset=("OPENBLAS_CORETYPE",))["core"] == core
    assert _probe({"OPENBLAS_CORETYPE": "Haswell"})["core"] == "Haswell"  # an explicit setting wins


# A process that sees no system OpenBLAS: the search patterns emptied, `sys.prefix` moved to a
# directory that stands for the Python environment.
NO_SYSTEM_BLAS = """
import ctypes.util, sys
import deployments.blas as b
b._SEARCH = ()
ctypes.util.find_library = lambda name: None
sys.prefix = {prefix!r}
"""


def test_without_a_system_openblas_a_wheel_blas_in_the_environment_is_bound(openblas, tmp_path):
    """The mkl wheel puts libmkl_rt.so.N in the environment's lib/. Any library with the cblas
    symbols stands for it here (the system OpenBLAS under that name): what is checked is that
    `auto` finds it there, binds MLX to it and reports it."""
    (tmp_path / "lib").mkdir()
    wheel_library = tmp_path / "lib" / "libmkl_rt.so.3"
    wheel_library.symlink_to(os.path.realpath(openblas))
    probe = _probe({blas.ENV: "auto"}, before=NO_SYSTEM_BLAS.format(prefix=str(tmp_path)))
    assert probe["library"] == str(wheel_library) and probe["kind"] == "mkl"
    assert os.path.realpath(openblas) in probe["mapped"] and probe["max_error"] < 1e-3


def test_the_reference_blas_by_default_is_a_warning_with_the_cost_and_the_fix(tmp_path):
    run = subprocess.run(
        [sys.executable, "-c", NO_SYSTEM_BLAS.format(prefix=str(tmp_path)) + "b.select()"],
        env={**os.environ, blas.ENV: "auto"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "30x slower" in run.stderr and "sudo apt-get install libopenblas0-pthread" in run.stderr
    assert "make setup" in run.stderr


def test_only_an_unasked_for_reference_blas_on_linux_is_warned_about():
    assert blas.slow_warning(blas.BlasChoice(blas.REFERENCE, "no OpenBLAS or MKL found"))
    assert blas.slow_warning(blas.BlasChoice(blas.REFERENCE, f"{blas.ENV}=reference")) is None
    assert blas.slow_warning(blas.BlasChoice("/usr/lib/x/libopenblas.so.0", "system OpenBLAS found")) is None


@pytest.mark.parametrize(
    "library, kind",
    [
        (blas.REFERENCE, "reference"),
        ("/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0", "openblas"),
        ("/venv/lib/libmkl_rt.so.3", "mkl"),
        ("/opt/blis/libblis.so.4", "other"),
    ],
)
def test_each_choice_names_its_kind(library, kind):
    assert blas.BlasChoice(library, "test").kind == kind == blas.BlasChoice(library, "test").as_dict()["kind"]


def test_wheel_libraries_are_found_in_the_environments_lib(tmp_path, monkeypatch):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libmkl_rt.so.3").write_bytes(b"")
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert blas.wheel_candidates() == [str(tmp_path / "lib" / "libmkl_rt.so.3")]
