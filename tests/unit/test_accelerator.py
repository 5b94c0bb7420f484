"""Which MLX build setup installs (deployments/accelerator.py), with the NVIDIA driver faked:
nvidia-smi's output and /proc/driver/nvidia/version as real drivers print them, the choice of
wheel from them, the pip steps that swap builds, and what a process reports it runs on."""

from __future__ import annotations

import importlib.metadata

import pytest

from deployments import accelerator
from deployments.accelerator import CPU, CUDA12, CUDA13, METAL, Choice, Driver, Gpu

# nvidia-smi's header on the H200 machines this project may borrow (driver 580, CUDA 13.0).
SMI_580 = """Thu Nov 27 10:00:00 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.159.03             Driver Version: 580.159.03     CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
|=========================================+========================+======================|
|   0  NVIDIA H200                    On  |   00000000:00:05.0 Off |                    0 |
+-----------------------------------------+------------------------+----------------------+
"""
PROC_580 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.03  Release Build  "
    "(dvs-builder@U16-I1-N08-05-1)  Mon Oct 20 2025\nGCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n"
)
SMI_570 = "| NVIDIA-SMI 570.86.15              Driver Version: 570.86.15      CUDA Version: 12.8     |\n"
PROC_535 = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n"
SMI_535 = "| NVIDIA-SMI 535.183.01             Driver Version: 535.183.01   CUDA Version: 12.2     |\n"
QUERY = "--query-gpu=name,compute_cap"


def fake_driver(header=None, gpus="", proc=None):
    """nvidia-smi and /proc as a machine with this driver answers (None: not there)."""

    def smi(args):
        if header is None:
            return None
        return gpus if args and args[0] == QUERY else header

    def read(path):
        assert path == accelerator.PROC_VERSION
        return proc

    return accelerator.detect_driver(smi, read)


H200 = fake_driver(SMI_580, "NVIDIA H200, 9.0\n", PROC_580)


def test_the_driver_is_read_from_nvidia_smi_and_proc():
    assert H200 == Driver("580.159.03", (13, 0), (Gpu("NVIDIA H200", (9, 0)),))
    assert H200.describe() == "NVIDIA driver 580.159.03, CUDA 13.0, NVIDIA H200 (SM 9.0)"
    # The older proprietary module's line, and nvidia-smi's own header when /proc is not readable.
    assert accelerator.parse_driver_version(PROC_535) == "535.183.01"
    assert fake_driver(SMI_570, "NVIDIA L4, 8.9\nNVIDIA L4, 8.9\n").version == "570.86.15"
    assert fake_driver(SMI_570).gpus == ()  # an nvidia-smi that cannot answer compute_cap
    assert accelerator.parse_gpus("Tesla V100-SXM2-16GB, 7.0\nSome GPU, [N/A]\n") == (
        Gpu("Tesla V100-SXM2-16GB", (7, 0)),
        Gpu("Some GPU", None),
    )


def test_no_driver_is_no_driver():
    assert fake_driver() is None
    # The kernel module without nvidia-smi: a driver, its CUDA version unknown.
    assert fake_driver(proc=PROC_535) == Driver("535.183.01", None, ())


def test_the_wheel_follows_the_drivers_cuda_version():
    assert accelerator.choose("linux", "x86_64", H200) == Choice(CUDA13, H200.describe())
    assert accelerator.choose("linux", "aarch64", H200).build == CUDA13  # GH200, DGX Spark
    cuda12 = fake_driver(SMI_570, "NVIDIA L4, 8.9\n")
    assert accelerator.choose("linux", "x86_64", cuda12).build == CUDA12
    assert accelerator.choose("linux", "x86_64", cuda12).package == "mlx-cuda-12"


def test_a_machine_without_a_driver_keeps_the_cpu_build_silently():
    choice = accelerator.choose("linux", "x86_64", None)
    assert choice == Choice(CPU, "no NVIDIA driver", quiet=True) and choice.package == "mlx-cpu"


@pytest.mark.parametrize(
    "machine, driver, why",
    [
        ("x86_64", fake_driver(SMI_535, "NVIDIA A10G, 8.6\n", PROC_535), "needs driver 550.54.14"),
        ("x86_64", fake_driver(SMI_580, "Tesla V100-SXM2-16GB, 7.0\n"), "compute capability 7.5"),
        ("x86_64", fake_driver(proc=PROC_535), "did not say which CUDA version"),
        ("ppc64le", H200, "built for x86_64 and aarch64 only"),
    ],
)
def test_a_driver_mlx_cannot_use_keeps_the_cpu_build_and_says_why(machine, driver, why):
    choice = accelerator.choose("linux", machine, driver)
    assert choice.build == CPU and not choice.quiet and why in choice.reason, choice


def test_one_supported_gpu_is_enough():
    mixed = fake_driver(SMI_580, "Tesla V100-SXM2-16GB, 7.0\nNVIDIA L40S, 8.9\n")
    assert accelerator.choose("linux", "x86_64", mixed).build == CUDA13


def test_the_setting_overrides_and_macos_installs_nothing():
    assert accelerator.choose("linux", "x86_64", H200, "cpu") == Choice(CPU, "OMINIX_MLX_BUILD=cpu")
    assert accelerator.choose("linux", "x86_64", None, "CUDA12").build == CUDA12
    wrong = accelerator.choose("linux", "x86_64", H200, "rocm")
    assert wrong.build == CPU and "not one of auto, cpu, cuda12, cuda13" in wrong.reason
    mac = accelerator.choose("darwin", "arm64", None)
    assert mac.build == METAL and mac.package is None and mac.quiet


CUDA13_CHOICE = Choice(CUDA13, "driver")
FETCH = ["download", "--no-deps", "--dest", "/w", "mlx-cuda-13==0.32.4"]
PUT_BACK = ["install", "--no-deps", "--force-reinstall", "--no-index", "--find-links", "/w", "mlx-cuda-13==0.32.4"]


@pytest.mark.parametrize(
    "chosen, installed, steps",
    [
        (Choice(CPU, "no driver"), {CPU: "0.32.4"}, []),  # the development machine: nothing
        (CUDA13_CHOICE, {CUDA13: "0.32.4"}, []),
        # The first setup on a GPU machine: pip gave mlx-cpu. The CUDA build and its NVIDIA
        # libraries come in over it, then mlx-cpu goes, deleting the files the two share, which
        # the fetched wheel puts back offline.
        (
            CUDA13_CHOICE,
            {CPU: "0.32.4"},
            [FETCH, ["install", "mlx-cuda-13==0.32.4"], ["uninstall", "--yes", "mlx-cpu"], PUT_BACK],
        ),
        # `pip install -e .` again (pyproject.toml changed) brought mlx-cpu back over the CUDA
        # build's files; its NVIDIA libraries are still there.
        (CUDA13_CHOICE, {CPU: "0.32.4", CUDA13: "0.32.4"}, [FETCH, ["uninstall", "--yes", "mlx-cpu"], PUT_BACK]),
        # MLX upgraded: the build follows the binding's version (pip replaces its old version).
        (
            CUDA13_CHOICE,
            {CPU: "0.33.0", CUDA13: "0.32.4"},
            [
                [*FETCH[:-1], "mlx-cuda-13==0.33.0"],
                ["install", "mlx-cuda-13==0.33.0"],
                ["uninstall", "--yes", "mlx-cpu"],
                [*PUT_BACK[:-1], "mlx-cuda-13==0.33.0"],
            ],
        ),
        # An operator's OMINIX_MLX_BUILD=cpu on a GPU machine.
        (
            Choice(CPU, "forced"),
            {CUDA13: "0.32.4"},
            [
                ["download", "--no-deps", "--dest", "/w", "mlx-cpu==0.32.4"],
                ["install", "mlx-cpu==0.32.4"],
                ["uninstall", "--yes", "mlx-cuda-13"],
                ["install", "--no-deps", "--force-reinstall", "--no-index", "--find-links", "/w", "mlx-cpu==0.32.4"],
            ],
        ),
        (Choice(METAL, "macOS"), {METAL: "0.32.4"}, []),
    ],
)
def test_the_swap_leaves_exactly_the_chosen_build(chosen, installed, steps):
    mlx = "0.33.0" if installed.get(CPU) == "0.33.0" else "0.32.4"
    assert accelerator.swap_plan(chosen, installed, mlx, "/w") == steps


def test_nothing_to_swap_without_the_binding():
    assert accelerator.swap_plan(CUDA13_CHOICE, {CPU: "0.32.4"}, None, "/w") == []


class Pip:
    """pip as setup calls it, over an environment's builds and the files they share
    (`mlx/lib/libmlx.so`: whose copy is there); `offline`: PyPI cannot be reached."""

    def __init__(self, installed: dict[str, str], offline: bool = False):
        self.installed, self.offline, self.calls = dict(installed), offline, []
        self.libmlx = next(iter(installed), None)
        self.fetched = set()

    def __call__(self, args: list[str]) -> bool:
        self.calls.append(args)
        names = {package: build for build, package in accelerator.PACKAGES.items()}
        if args[0] == "uninstall":
            for package in args[2:]:
                self.installed.pop(names[package], None)
                self.libmlx = None  # its RECORD lists the shared files: gone, whoever wrote them
            return True
        package, _, version = args[-1].partition("==")
        if "--no-index" not in args and self.offline:
            return False
        if args[0] == "download":
            self.fetched.add(args[-1])
            return True
        assert "--no-index" not in args or args[-1] in self.fetched
        self.installed[names[package]] = version
        self.libmlx = names[package]
        return True


def test_setup_installs_the_cuda_build_in_place_of_the_cpu_one():
    pip, said = Pip({CPU: "0.32.4"}), []
    accelerator.setup(CUDA13_CHOICE, lambda: pip.installed, "0.32.4", pip, said.append)
    assert pip.installed == {CUDA13: "0.32.4"} and pip.libmlx == CUDA13
    assert said == ["MLX build: installing mlx-cuda-13==0.32.4 (driver)"]


def test_without_pypi_the_installed_build_stays_whole():
    pip, said = Pip({CPU: "0.32.4"}, offline=True), []
    accelerator.setup(CUDA13_CHOICE, lambda: pip.installed, "0.32.4", pip, said.append)
    assert pip.installed == {CPU: "0.32.4"} and pip.libmlx == CPU and len(pip.calls) == 1
    assert said[-1] == "MLX build: mlx-cuda-13 could not be installed; mlx-cpu 0.32.4 stays"


def test_setup_says_nothing_on_a_machine_without_a_driver():
    pip, said = Pip({CPU: "0.32.4"}), []
    accelerator.setup(accelerator.choose("linux", "x86_64", None), lambda: pip.installed, "0.32.4", pip, said.append)
    assert pip.calls == [] and said == []
    old = accelerator.choose("linux", "x86_64", fake_driver(SMI_535, "NVIDIA A10G, 8.6\n", PROC_535))
    accelerator.setup(old, lambda: pip.installed, "0.32.4", pip, said.append)
    assert pip.calls == [] and len(said) == 1 and said[0].startswith("MLX build: keeping mlx-cpu (NVIDIA driver 535")


def test_installed_builds_reads_the_environments_metadata():
    versions = {"mlx-cpu": "0.32.4"}

    def version(name):
        if name not in versions:
            raise importlib.metadata.PackageNotFoundError(name)
        return versions[name]

    assert accelerator.installed_builds(version) == {CPU: "0.32.4"}
    assert accelerator.installed_build({CUDA13: "0.32.4"}) == "mlx-cuda-13 0.32.4"


def test_the_backend_is_the_default_devices():
    h200 = accelerator.backend_of("gpu", True, False, {"device_name": "NVIDIA H200"}, "mlx-cuda-13 0.32.4")
    assert h200.backend == "cuda" and accelerator.label(h200.as_dict()) == "cuda (NVIDIA H200)"
    assert accelerator.backend_of("gpu", False, True, {"device_name": "Apple M3"}, None).backend == "metal"
    # MLX's CUDA build told to compute on the CPU (mx.set_default_device(mx.cpu)) runs the CPU paths.
    assert accelerator.backend_of("cpu", True, False, {}, "mlx-cuda-13 0.32.4").backend == "cpu"
    assert accelerator.label({"backend": "cpu", "device_name": None}) == "cpu"


def test_this_process_reports_what_mlx_runs_on():
    import mlx.core as mx

    backend = accelerator.runtime()
    assert backend.device == ("cpu" if accelerator.on_cpu_backend() else "gpu")
    assert backend.cuda == mx.cuda.is_available() and backend.metal == mx.metal.is_available()
    assert backend.build == accelerator.installed_build(accelerator.installed_builds())


def test_the_cpu_only_paths_stay_off_on_a_gpu():
    """The float32 dtype policy and Whisper's float32 are the CPU backend's; a CUDA GPU, like
    Metal, keeps the checkpoint's dtype and Whisper's float16."""
    from deployments.asr.config import whisper_dtype
    from deployments.llm.dtype_policy import Weights, decide

    bf16 = Weights(frozenset({"bfloat16"}), False, 2 << 20, 4 << 20)
    assert decide("auto", True, bf16, 1 << 30).upcast
    assert not decide("auto", False, bf16, 1 << 30).upcast and not decide("float32", False, bf16, 1 << 30).upcast
    assert (whisper_dtype("auto", True), whisper_dtype("auto", False)) == ("float32", "float16")
    assert whisper_dtype("float32", False) == "float32"


def test_no_cpu_only_path_is_gated_on_metal_alone():
    """`mx.metal.is_available()` is false on MLX's CUDA build: a path switched on by its absence
    would run on an NVIDIA GPU as on the CPU. The gates ask for the CPU backend
    (accelerator.on_cpu_backend, or the device type); only the report reads Metal's flag."""
    from pathlib import Path

    root = Path(accelerator.__file__).resolve().parents[1]
    found = [
        f"{path.relative_to(root)}:{n}"
        for folder in ("deployments", "graphs", "bench")
        for path in sorted((root / folder).rglob("*.py"))
        if path.name != "accelerator.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "metal.is_available" in line
    ]
    assert found == []
