"""bench/model.py's checkpoint forms: the benchmark model as bfloat16 and as mlx-lm 4-bit,
loadable by mlx-lm (so mlx_lm.server serves the same directory), which the graph's CPU dtype
policy then serves as dense float32."""

from __future__ import annotations

import mlx_lm
import pytest

from bench.model import SMOKE_CONFIG, ensure_bench_model, ensure_form
from deployments.llm.dtype_policy import inspect_weights


@pytest.mark.parametrize("form,expected", [("bfloat16", "bfloat16"), ("4bit", "quantized + bfloat16")])
def test_a_form_is_a_loadable_checkpoint(tmp_path, form, expected):
    base = ensure_bench_model(tmp_path, SMOKE_CONFIG)
    model, _ = mlx_lm.load(str(ensure_form(base, form)))
    weights = inspect_weights(model)
    assert weights.form == expected
    assert weights.float32_bytes == inspect_weights(mlx_lm.load(str(base))[0]).bytes
    assert ensure_form(base, "float32") == base
