"""Per-module / per-op time of one model call on MLX, with evaluation barriers.

MLX is lazy: an op's time shows where its result is evaluated, not where it is written. The
`Profiler` makes each timed call evaluate its array arguments before its clock starts and its
results before it stops, so a call's time is the work it does itself. Times are inclusive
(everything under the call) and exclusive (minus the timed calls under it); what a caller does
between timed calls (the elementwise ops of a residual block, say) is its exclusive time.

Timed are the `__call__` of chosen `mlx.nn.Module` classes and any named function (an MLX op
such as `mlx.core.conv1d`, a model's helper): `Profiler.module(cls)` / `Profiler.function(owner,
name, label)`. The barriers cost fusion and some overlap, so the total is a little above an
unbarriered call; each profile reports both.

The clock is the process's CPU time (`time.process_time`, all its threads), not the wall: on
the shared 2-core machine other sessions' work stretches wall times several-fold and unevenly,
while the CPU time a computation takes moves much less. The models here run on one BLAS
thread, so on a quiet machine the two agree.

`python -m bench.profile kokoro|llm [--repeats N]` prints the table; bench/kokoro_profile.py
and the LLM part below are the two profiles in docs/performance.md ("Profiles").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


clock = time.process_time


def _arrays(value) -> list:
    import mlx.core as mx

    if isinstance(value, mx.array):
        return [value]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _arrays(v)]
    if isinstance(value, dict):
        return [a for v in value.values() for a in _arrays(v)]
    return []


class Profiler:
    """Patches calls to time them; `with profiler.active():` records, then `rows()`."""

    def __init__(self):
        self._patches: list[tuple[object, str, object]] = []
        self._stack: list[list[float]] = []  # per open call: [time spent in timed children]
        self.inclusive: dict[str, float] = defaultdict(float)
        self.exclusive: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.recording = False

    def _timed(self, label: Callable[..., str] | str, fn: Callable) -> Callable:
        import mlx.core as mx

        def wrapper(*args, **kwargs):
            if not self.recording:
                return fn(*args, **kwargs)
            mx.eval(_arrays(args), _arrays(kwargs))  # the inputs are the caller's work
            name = label(*args, **kwargs) if callable(label) else label
            self._stack.append([0.0])
            t0 = clock()
            try:
                out = fn(*args, **kwargs)
                mx.eval(_arrays(out))
            finally:
                spent = clock() - t0
                children = self._stack.pop()[0]
            self.inclusive[name] += spent
            self.exclusive[name] += spent - children
            self.calls[name] += 1
            if self._stack:
                self._stack[-1][0] += spent
            return out

        return wrapper

    def module(self, cls: type, label: str | None = None) -> None:
        """Time `cls.__call__` (every instance) under `label` (default: the class name)."""
        self.function(cls, "__call__", label or cls.__name__)

    def function(self, owner: object, name: str, label: Callable[..., str] | str) -> None:
        """Time `owner.name` (a module attribute or a method) under `label` (or label(*args))."""
        original = getattr(owner, name)
        own = not isinstance(owner, type) or name in owner.__dict__  # else inherited: delete after
        self._patches.append((owner, name, original if own else None))
        setattr(owner, name, self._timed(label, original))

    def restore(self) -> None:
        for owner, name, original in reversed(self._patches):
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        self._patches.clear()

    @contextmanager
    def active(self):
        self.recording = True
        try:
            yield self
        finally:
            self.recording = False

    def reset(self) -> None:
        self.inclusive.clear()
        self.exclusive.clear()
        self.calls.clear()

    def rows(self, runs: int = 1) -> list[dict]:
        """Per label, per run: calls, inclusive and exclusive ms; the largest exclusive first."""
        total = sum(self.exclusive.values())
        rows = [
            {
                "name": name,
                "calls": self.calls[name] / runs,
                "inclusive_ms": self.inclusive[name] * 1e3 / runs,
                "exclusive_ms": self.exclusive[name] * 1e3 / runs,
                "share": self.exclusive[name] / total if total else 0.0,
            }
            for name in self.exclusive
        ]
        return sorted(rows, key=lambda r: -r["exclusive_ms"])


def render_rows(rows: Iterable[dict]) -> str:
    from bench.report import table

    return table(
        ["call", "calls", "exclusive ms", "share", "inclusive ms"],
        [[r["name"], r["calls"], r["exclusive_ms"], f"{100 * r['share']:.1f}%", r["inclusive_ms"]] for r in rows],
    )


def conv_label(op: str) -> Callable[..., str]:
    """A label per convolution kind and size class: `conv1d k7 d3 C256` and so on."""

    def label(x, weight, stride=1, padding=0, dilation=1, *rest, groups=None, **kwargs):
        if groups is None:
            groups = rest[-1] if rest else 1
        c_out, kernel, _ = weight.shape
        parts = [op, f"k{kernel}"]
        if stride != 1:
            parts.append(f"s{stride}")
        if dilation != 1:
            parts.append(f"d{dilation}")
        if groups != 1:
            parts.append(f"g{groups}")
        parts.append(f"L{x.shape[1]} {x.shape[2]}->{c_out}")
        return " ".join(parts)

    return label


# ---------------------------------------------------------------------------------- LLM


def profile_llm(cache_dir: Path, repeats: int, context: int = 64) -> dict:
    """One decode step of the shipped SmolLM2-135M (dense float32 on the CPU) after a
    `context`-token prompt: per module, and the step's time without barriers."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm.models import cache as cache_mod
    from mlx_lm.models import llama
    from mlx_lm.utils import load

    from deployments.llm.smollm2 import ensure_smollm2

    model_dir = ensure_smollm2(cache_dir)
    model, _ = load(str(model_dir))
    cache = cache_mod.make_prompt_cache(model)
    prompt = mx.array([[(i * 37) % 1000 + 10 for i in range(context)]])
    mx.eval(model(prompt, cache=cache))
    token = mx.array([[42]])

    def step():
        logits = model(token, cache=cache)
        mx.eval(logits)
        for c in cache:  # keep the context length fixed: drop the step's key/value again
            c.offset -= 1

    step()
    plain = []
    for _ in range(repeats):
        t0 = clock()
        step()
        plain.append(clock() - t0)
    profiler = Profiler()
    for cls in (llama.Model, llama.Attention, llama.MLP, llama.TransformerBlock, nn.RMSNorm, nn.Embedding):
        profiler.module(cls, f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}")
    profiler.function(nn.Embedding, "as_linear", "lm_head (tied embedding)")
    profiler.function(cache_mod.KVCache, "update_and_fetch", "KVCache.update_and_fetch")
    profiler.function(mx.fast, "scaled_dot_product_attention", "sdpa (mx.fast)")
    profiler.function(mx.fast, "rope", "rope (mx.fast)")
    profiler.function(nn.Linear, "__call__", lambda self, x: f"Linear {self.weight.shape[1]}->{self.weight.shape[0]}")
    try:
        with profiler.active():
            for _ in range(repeats):
                step()
        rows = profiler.rows(repeats)
    finally:
        profiler.restore()
    return {
        "model": model_dir.name,
        "context": context,
        "repeats": repeats,
        "step_ms_unbarriered": sorted(plain)[len(plain) // 2] * 1e3,
        "step_ms_profiled": sum(r["exclusive_ms"] for r in rows),
        "rows": rows,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    p.add_argument("model", choices=["kokoro", "llm"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cache-dir", type=Path, default=Path("~/.cache/ominix-serve").expanduser())
    p.add_argument("--out", type=Path, default=None, help="also write the result here as JSON")
    opts = p.parse_args(argv)
    load = list(os.getloadavg())
    if opts.model == "llm":
        result = profile_llm(opts.cache_dir, opts.repeats)
        print(
            f"{result['model']}: one decode step at {result['context']} tokens of context: "
            f"{result['step_ms_unbarriered']:.1f} ms plain, {result['step_ms_profiled']:.1f} ms with barriers"
        )
    else:
        from bench.kokoro_profile import profile_kokoro

        result = profile_kokoro(opts.cache_dir, opts.repeats)
        print(
            f"Kokoro, {result['audio_s']:.2f} s of audio: {result['synthesis_s_unbarriered']:.2f} s plain "
            f"(RTF {result['rtf_unbarriered']:.2f}; wall {result['synthesis_wall_s_unbarriered']:.2f} s), "
            f"{result['synthesis_s_profiled']:.2f} s with barriers (CPU time)"
        )
    result.update(
        kernels=os.environ.get("OMINIX_CPU_KERNELS", "all"),
        load_average_before=load,
        load_average_after=list(os.getloadavg()),
    )
    print(
        f"kernels: {result['kernels']}; load average before {load[0]:.1f}, after {result['load_average_after'][0]:.1f}"
    )
    print(render_rows(result["rows"]))
    if opts.out:
        opts.out.parent.mkdir(parents=True, exist_ok=True)
        opts.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
