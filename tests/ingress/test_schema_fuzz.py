"""Schemathesis against the ingress's own /openapi.json, in process: `create_app()` over the fake
slots and a fake Control (tests/ingress/conftest.py, tests/ingress/test_models.py), every
operation of the schema, every generated request checked by tests/schema_fuzz.py's `checks_for`:
no 5xx, and a request the schema calls invalid refused with a 4xx, never served.

The coverage phase sends, field by field, the schema's boundary values, wrong types, missing
required fields and values outside an enum (deterministic, the kind of case the hand-written
corpora in tests/corpus/ list by hand); the fuzzing phase adds a few random requests per
operation, derandomized so every run sends the same ones. The same checks against the live
graph: tests/e2e/test_schema_fuzz.py.
"""

from __future__ import annotations

import tempfile

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from deployments.ingress.app import create_app
from graphs.config import GraphArgs
from tests.ingress.conftest import default_slots, ingress_state, shipped_args
from tests.ingress.test_models import DEFAULTS, FakeControl
from tests.schema_fuzz import checks_for

CONFIG = schemathesis.Config.from_dict(
    {"generation": {"mode": "all"}, "phases": {"examples": {"enabled": True}, "coverage": {"enabled": True}}}
)


def _shipped_app(cache_dir: str):
    config = GraphArgs.from_args(shipped_args(cache_dir=cache_dir), environ={})
    return create_app(ingress_state(config, default_slots(), control=FakeControl(DEFAULTS)))


def _openapi() -> dict:
    """The shipped config's schema, read once at collection (one test per operation)."""
    with tempfile.TemporaryDirectory() as cache_dir:
        return _shipped_app(cache_dir).openapi()


schema = schemathesis.openapi.from_dict(_openapi(), config=CONFIG)


@pytest.fixture
def fuzz_app(tmp_path):
    """One app per operation: the examples of one operation share it (what they store stays)."""
    return _shipped_app(str(tmp_path))


@schema.parametrize()
@settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_no_5xx_and_invalid_requests_refused(case, fuzz_app):
    case.call_and_validate(app=fuzz_app, checks=checks_for(case))
