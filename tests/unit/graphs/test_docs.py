"""docs/configuration.md is generated from the config models: it must be current, and every
arg and environment variable must say what it means."""

from graphs.config import GraphArgs
from graphs.docs import OUTPUT, fields, render


def test_the_configuration_reference_is_current():
    assert OUTPUT.read_text() == render(), "docs/configuration.md is stale: run `python -m graphs.docs`"


def test_every_arg_has_a_meaning():
    from deployments.env import ENV_VARS

    by_target = {var.target for var in ENV_VARS}
    missing = [path for path, field in fields(GraphArgs) if not field.description and path not in by_target]
    assert not missing, f"args without a description: {missing}"


def test_every_variable_sets_an_arg_or_an_http_option():
    from deployments.env import ENV_VARS, HTTP_OPTIONS

    paths = {path for path, _ in fields(GraphArgs)}
    for var in ENV_VARS:
        assert var.target.startswith(HTTP_OPTIONS) or var.target in paths, var
