"""Shared fixtures: the built-in models (tiny and SmolLM2), made once per test session."""

import json
import os
from pathlib import Path

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


@pytest.fixture(scope="session")
def example_adapters(smollm2_dir) -> dict:
    """The four example LoRA adapters of SmolLM2 (deployments/llm/example_adapters.py): trained
    with mlx_lm.lora once per machine into the default model cache (OMINIX_CACHE_DIR), where
    later sessions, both halves of `make test` and the e2e graph find them; name -> directory."""
    from deployments.hub import default_cache_dir
    from deployments.llm.example_adapters import ensure_example_adapters

    return ensure_example_adapters(default_cache_dir(), smollm2_dir)


# The suite's time budget by file (docs/testing.md): setup, call and teardown of every test summed
# per file and printed for every file at the end of each half of `make test`, next to
# --durations' slowest single steps, so every run shows where the time goes. OMINIX_TEST_TIMES
# names a JSON file that gets the same table (docs/testing.md's starting point was made so).
_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _FILE_SECONDS:
        return
    total = sum(_FILE_SECONDS.values())
    terminalreporter.write_sep("=", f"time per file ({total / 60:.1f} min in tests, {len(_FILE_SECONDS)} files)")
    for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{seconds:8.1f}s {seconds / total:6.1%}  {path}")
    if out := os.environ.get("OMINIX_TEST_TIMES"):
        Path(out).write_text(json.dumps(dict(sorted(_FILE_SECONDS.items())), indent=1))
