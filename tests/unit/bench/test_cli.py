"""`python -m bench`'s arguments: presets fill what is not given, and unknown names stop it
before any cluster starts."""

import pytest

from bench.__main__ import parse_args


def test_presets_fill_what_is_not_given():
    opts = parse_args(["--quick", "--scenarios", "llm", "--llm-systems", "graph_per_core,mlx_lm_server_all_cores"])
    assert opts.concurrency == [1, 16] and opts.repeats == 1 and opts.tokens == 32
    assert opts.llm_systems == ["graph_per_core", "mlx_lm_server_all_cores"]
    assert parse_args(["--smoke", "--concurrency", "1,4"]).concurrency == [1, 4]


@pytest.mark.parametrize("argv", [["--scenarios", "llm,nope"], ["--llm-systems", "graph,mlx_lm_servr"]])
def test_unknown_names_stop_it(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        parse_args(argv)
    assert stop.value.code == 2 and "unknown" in capsys.readouterr().err
