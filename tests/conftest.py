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
