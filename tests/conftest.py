"""Shared fixtures: the built-in models (tiny and SmolLM2), made once per test session."""

import pytest

from deployments import blas
from tests.fake_hub import hub  # noqa: F401 (a fake Hugging Face hub serving TINY_REPO)

# The unit tests run engines in this process: multiply with the same BLAS a slot replica picks
# (deployments/slot_replica.py) before any test imports mlx.
blas.select()


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ominix-cache")


@pytest.fixture(scope="session")
def tiny_llm_dir(cache_dir):
    from deployments.llm.tiny_model import ensure_tiny_llm

    return ensure_tiny_llm(cache_dir)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_llm_dir):
    from mlx_lm.tokenizer_utils import load

    return load(tiny_llm_dir)


@pytest.fixture(scope="session")
def smollm2_dir(cache_dir):
    """The default LLM, converted once per session in the form this backend serves."""
    from deployments.llm.smollm2 import ensure_smollm2

    return ensure_smollm2(cache_dir)


# The suite's time budget by file (CI runs on 2 cores and must stay well under 60 minutes):
# setup, call and teardown of every test summed per file, the slowest printed at the end, next to
# --durations' slowest single steps.
_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _FILE_SECONDS:
        return
    total = sum(_FILE_SECONDS.values())
    terminalreporter.write_sep("=", f"slowest files ({total / 60:.1f} min in tests)")
    for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:20]:
        terminalreporter.write_line(f"{seconds:8.1f}s {seconds / total:6.1%}  {path}")
