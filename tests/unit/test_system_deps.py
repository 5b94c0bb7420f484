"""What `make setup` and `make test` do about system packages (deployments/system_deps.py):
which are missing, the apt-get or dnf command that installs them as root or through sudo, the
one line per package otherwise, and when the mkl wheel stands in for OpenBLAS. No package
manager runs here: the decisions are checked on the machines they describe."""

from __future__ import annotations

import pytest

from deployments import system_deps
from deployments.system_deps import OPENBLAS, RUNTIME, TEST, Package, missing, plan

FFMPEG, NPM, CHROMIUM = (system_deps.BY_NAME[name] for name in ("ffmpeg", "npm", "chromium"))


def present_only(*names: str):
    return lambda package: package.name in names


def test_each_group_lists_only_what_is_missing_of_it():
    runtime = missing([RUNTIME], present_only("ffmpeg"))
    assert [p.name for p in runtime] == [OPENBLAS, "npm"]
    tests = missing([TEST], present_only("espeak-ng"))
    assert [p.name for p in tests] == ["chromium", "prometheus"]
    assert missing(["runtime", "test"], lambda package: True) == []


def test_a_tool_is_present_when_any_of_its_commands_is_on_the_path():
    on_path = {"chromium-browser": "/usr/bin/chromium-browser"}
    assert system_deps.is_present(CHROMIUM, on_path.get)
    assert not system_deps.is_present(FFMPEG, on_path.get)


def test_openblas_is_present_when_a_fast_blas_library_is_found():
    openblas = system_deps.BY_NAME[OPENBLAS]
    assert system_deps.is_present(openblas, libraries=lambda: ["/usr/lib/x/libopenblas.so.0"])
    assert not system_deps.is_present(openblas, libraries=lambda: [])


def test_root_installs_with_apt_get_in_one_command_after_an_update():
    steps = plan([system_deps.BY_NAME[OPENBLAS], FFMPEG], "apt-get", is_root=True, has_sudo=False)
    apt = ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]
    assert steps.run == [[*apt, "update", "-qq"], [*apt, "install", "-y", "-qq", OPENBLAS, "ffmpeg"]]
    assert steps.hints == []


def test_passwordless_sudo_installs_through_sudo_without_a_prompt():
    steps = plan([FFMPEG], "apt-get", is_root=False, has_sudo=True)
    assert all(command[:2] == ["sudo", "-n"] for command in steps.run)


def test_dnf_uses_fedoras_names_and_names_what_it_has_no_package_for():
    prometheus = system_deps.BY_NAME["prometheus"]
    steps = plan([system_deps.BY_NAME[OPENBLAS], FFMPEG, prometheus], "dnf", is_root=True, has_sudo=False)
    assert steps.run == [["dnf", "install", "-y", "-q", "openblas", "ffmpeg-free"]]
    assert len(steps.hints) == 1 and "prometheus is missing" in steps.hints[0]


@pytest.mark.parametrize("manager", ["apt-get", "dnf", None])
def test_without_root_or_sudo_one_line_per_package_says_what_to_run(manager):
    steps = plan([system_deps.BY_NAME[OPENBLAS], NPM], manager, is_root=False, has_sudo=False)
    assert steps.run == []
    assert len(steps.hints) == 2
    assert all(line.startswith(system_deps.PREFIX) and "sudo" in line for line in steps.hints)
    assert "30x slower" in steps.hints[0] and "Kokoro's voices" in steps.hints[1]
    if manager == "dnf":
        assert "`sudo dnf install openblas`" in steps.hints[0]
    else:
        assert f"`sudo apt-get install {OPENBLAS}`" in steps.hints[0]


def test_nothing_missing_is_nothing_to_do():
    assert plan([], "apt-get", is_root=True, has_sudo=False) == system_deps.Plan()


@pytest.mark.parametrize(
    "openblas_missing, system, machine, in_venv, wanted",
    [
        (True, "linux", "x86_64", True, True),
        (False, "linux", "x86_64", True, False),  # the system OpenBLAS is there
        (True, "linux", "aarch64", True, False),  # the mkl wheel is x86-64 only
        (True, "darwin", "x86_64", True, False),  # Accelerate on a Mac
        (True, "linux", "x86_64", False, False),  # never into the system Python
    ],
)
def test_the_mkl_wheel_only_where_no_openblas_can_be_had(openblas_missing, system, machine, in_venv, wanted):
    assert system_deps.wants_wheel_blas(openblas_missing, system, machine, in_venv) is wanted


def test_the_mkl_wheel_requirement_is_read_from_pyproject():
    requirement = system_deps.wheel_blas_requirement()
    assert requirement is not None and requirement.startswith("mkl==")


def test_a_replica_names_each_tool_it_lacks_with_the_fix():
    lines = system_deps.replica_warnings(["ffmpeg"], {"apt-get": "/usr/bin/apt-get"}.get)
    assert len(lines) == 1 and "ffmpeg is missing" in lines[0] and "sudo apt-get install ffmpeg" in lines[0]
    assert system_deps.replica_warnings(["ffmpeg"], {"ffmpeg": "/usr/bin/ffmpeg"}.get) == []


def test_bad_arguments_are_a_usage_error_and_install_nothing(capsys):
    assert system_deps.main(["everything"]) == 2
    assert "usage" in capsys.readouterr().err


def test_every_package_says_what_it_costs_and_has_a_way_to_be_found():
    for package in system_deps.PACKAGES:
        assert isinstance(package, Package) and package.purpose and package.group in (RUNTIME, TEST)
        assert package.commands or package.name == OPENBLAS


def test_a_refused_batch_is_retried_one_package_at_a_time_and_what_stays_missing_is_named(monkeypatch, capsys):
    """apt-get installs all or nothing: npm beside NodeSource's nodejs must not keep ffmpeg out."""
    installed: set[str] = set()
    ran: list[list[str]] = []

    def fake_run(command: list[str]) -> bool:
        ran.append(command)
        names = [word for word in command if word in system_deps.BY_NAME]
        if "npm" in names:
            return False  # the conflict
        installed.update(names)
        return True

    monkeypatch.setattr(system_deps, "_run", fake_run)
    monkeypatch.setattr(system_deps, "package_manager", lambda: "apt-get")
    monkeypatch.setattr(system_deps.os, "geteuid", lambda: 0)
    monkeypatch.setattr(
        system_deps, "is_present", lambda package: package.name in installed or package.name == OPENBLAS
    )
    still = system_deps.install([RUNTIME])
    assert [p.name for p in still] == ["npm"] and "ffmpeg" in installed
    assert ran[-2:] == [
        ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq", "ffmpeg"],
        ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq", "npm"],
    ]
    assert "npm is missing" in capsys.readouterr().out
