"""Per-op profile of one Whisper encode and one decode, in process, on MLX's CPU backend.

MLX has no op profiler and evaluates lazily, so the encoder is re-run op by op from the
model's own modules with an `mx.eval` barrier after each op, and the decoder's calls and logit
filters are wrapped the same way. Each op is timed in process CPU seconds (all threads, so a
busy shared machine does not inflate it) and in wall seconds; the table sums an op over the
layers and takes the median over repeats.

`python -m bench.whisper_profile [--kernels on|off|both] [--repeats N]` prints the tables;
bench/asr_peers.py records them with its results (docs/performance.md, "Profiles").
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

UTTERANCE = "Please send the quarterly report to the finance team before Friday."


class OpTimer:
    """Sums CPU and wall milliseconds per op name; `op(name, fn)` evaluates fn() behind a barrier."""

    def __init__(self):
        self.cpu_ms: dict[str, float] = defaultdict(float)
        self.wall_ms: dict[str, float] = defaultdict(float)

    def op(self, name: str, fn):
        import mlx.core as mx

        c0, w0 = time.process_time(), time.perf_counter()
        out = fn()
        mx.eval([o for o in (out if isinstance(out, tuple) else (out,)) if o is not None])
        self.cpu_ms[name] += (time.process_time() - c0) * 1000
        self.wall_ms[name] += (time.perf_counter() - w0) * 1000
        return out


def encoder_ops(model, mel, timer: OpTimer):
    """mlx-audio's AudioEncoder forward (whisper.py), one op at a time; returns its output."""
    import mlx.core as mx

    from deployments.kernels import whisper as kernels

    enc = model.encoder
    x = mel[None] if mel.ndim == 2 else mel
    x = timer.op("conv1 (front end)", lambda: enc.conv1(x))
    x = timer.op("gelu", lambda: kernels.gelu(x))
    x = timer.op("conv2 (front end, stride 2)", lambda: enc.conv2(x))
    x = timer.op("gelu", lambda: kernels.gelu(x))
    x = timer.op("add / residual", lambda: x + enc._positional_embedding)
    for block in enc.blocks:
        attn = block.attn
        h = timer.op("layernorm", lambda: block.attn_ln(x))
        q = timer.op("q/k/v/out projections", lambda: attn.query(h))
        k = timer.op("q/k/v/out projections", lambda: attn.key(h))
        v = timer.op("q/k/v/out projections", lambda: attn.value(h))
        n_batch, n_ctx, n_state = q.shape
        scale = (n_state // attn.n_head) ** -0.25

        def heads(t, *axes):
            return t.reshape(n_batch, n_ctx, attn.n_head, -1).transpose(*axes)

        qs = timer.op("attention: head split, scale", lambda: heads(q, 0, 2, 1, 3) * scale)
        ks = timer.op("attention: head split, scale", lambda: heads(k, 0, 2, 3, 1) * scale)
        vs = timer.op("attention: head split, scale", lambda: heads(v, 0, 2, 1, 3))
        if kernels.enabled():
            o = timer.op("attention: QK^T, softmax, PV (numpy)", lambda: kernels.attention(qs, ks, vs))
        else:
            qk = timer.op("attention: QK^T", lambda: qs @ ks)
            w = timer.op("attention: softmax", lambda: mx.softmax(qk, axis=-1, precise=True))
            o = timer.op("attention: PV", lambda: w @ vs)
        o = timer.op("attention: head merge", lambda: o.transpose(0, 2, 1, 3).reshape(n_batch, n_ctx, n_state))
        y = timer.op("q/k/v/out projections", lambda: attn.out(o))
        x = timer.op("add / residual", lambda: x + y)
        h = timer.op("layernorm", lambda: block.mlp_ln(x))
        h = timer.op("mlp1 (384->1536)", lambda: block.mlp1(h))
        h = timer.op("gelu", lambda: kernels.gelu(h))
        h = timer.op("mlp2 (1536->384)", lambda: block.mlp2(h))
        x = timer.op("add / residual", lambda: x + h)
    out = timer.op("layernorm", lambda: enc.ln_post(x))
    mx.eval(out)
    return out


@contextmanager
def _timed_decoder(model, timer: OpTimer):
    """Time every decoder forward (first call: prompt + cross-attention K/V) and logit filter."""
    decoder = model.decoder
    calls = {"n": 0}
    original = type(decoder).__call__

    def call(self, x, xa, kv_cache=None):
        calls["n"] += 1
        name = "decoder forward, first (prompt, cross K/V)" if calls["n"] == 1 else "decoder forward, per token"
        return timer.op(name, lambda: original(self, x, xa, kv_cache))

    type(decoder).__call__ = call
    try:
        yield calls
    finally:
        type(decoder).__call__ = original


def decode_profile(model, features, options, timer: OpTimer) -> tuple[object, int]:
    """One `model.decode` from encoded features; the rest of the loop is 'other'."""
    from mlx_audio.stt.models.whisper import decoding

    filters = (decoding.SuppressBlank, decoding.SuppressTokens, decoding.ApplyTimestampRules)
    originals = {cls: cls.apply for cls in filters}
    for cls in filters:
        cls.apply = (
            lambda original, name: (
                lambda self, logits, tokens: timer.op(f"logit filter: {name}", lambda: original(self, logits, tokens))
            )
        )(originals[cls], cls.__name__)
    try:
        with _timed_decoder(model, timer) as calls:
            c0, w0 = time.process_time(), time.perf_counter()
            result = model.decode(features, options)[0]
            cpu, wall = (time.process_time() - c0) * 1000, (time.perf_counter() - w0) * 1000
    finally:
        for cls, apply in originals.items():
            cls.apply = apply
    timer.cpu_ms["other (sampling, Python)"] += cpu - sum(timer.cpu_ms.values())
    timer.wall_ms["other (sampling, Python)"] += wall - sum(timer.wall_ms.values())
    return result, calls["n"]


def load_engine(cache_dir: Path):
    """The ASR engine's whisper tiny.en, loaded the way a replica loads it (float32 on CPU)."""
    from deployments.asr.engine import ASREngine, EngineConfig
    from deployments.asr.whisper_tiny_en import WHISPER_TINY_EN_ID, ensure_whisper_tiny_en

    engine = ASREngine(WHISPER_TINY_EN_ID, ensure_whisper_tiny_en(cache_dir), EngineConfig())
    engine._load()
    return engine


def _median_table(runs: list[OpTimer]) -> list[dict]:
    names = list(dict.fromkeys(n for r in runs for n in r.cpu_ms))
    rows = [
        {
            "op": n,
            "cpu_ms": statistics.median(r.cpu_ms.get(n, 0.0) for r in runs),
            "wall_ms": statistics.median(r.wall_ms.get(n, 0.0) for r in runs),
        }
        for n in names
    ]
    total = sum(r["cpu_ms"] for r in rows) or 1.0
    for r in rows:
        r["share"] = r["cpu_ms"] / total
    return sorted(rows, key=lambda r: -r["cpu_ms"])


def profile(engine, audio, repeats: int = 3) -> dict:
    """Encoder and decoder op tables (medians over `repeats`) for `audio`, with the kernels as
    they are installed now."""
    import mlx.core as mx
    from mlx_audio.stt.models.whisper.decoding import DecodingOptions

    mel = engine._mel(audio)
    options = DecodingOptions(language="en", without_timestamps=False, fp16=False)
    encoder_runs, decoder_runs, tokens = [], [], 0
    encoder_ops(engine._model, mel, OpTimer())  # warm-up
    for _ in range(repeats):
        timer = OpTimer()
        features = encoder_ops(engine._model, mel, timer)
        encoder_runs.append(timer)
        timer = OpTimer()
        result, calls = decode_profile(engine._model, features, options, timer)
        decoder_runs.append(timer)
        tokens = calls
    mx.eval(features)
    return {
        "encoder": _median_table(encoder_runs),
        "decoder": _median_table(decoder_runs),
        "decoder_calls": tokens,
        "text": result.text.strip(),
    }


def render(name: str, rows: list[dict]) -> str:
    from bench.report import table

    total_cpu = sum(r["cpu_ms"] for r in rows)
    total_wall = sum(r["wall_ms"] for r in rows)
    body = [[r["op"], r["cpu_ms"], f"{100 * r['share']:.0f}%", r["wall_ms"]] for r in rows]
    body.append([f"**{name} total**", total_cpu, "100%", total_wall])
    return table([f"{name} op", "CPU ms", "share", "wall ms"], body)


def main(argv=None) -> int:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from deployments import blas

    blas.select()
    p = argparse.ArgumentParser(prog="python -m bench.whisper_profile", description=__doc__)
    p.add_argument("--kernels", choices=("on", "off", "both"), default="both")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cache-dir", type=Path, default=Path("~/.cache/ominix-serve").expanduser())
    opts = p.parse_args(argv)
    from deployments.kernels import whisper as kernels
    from tests.speech import speak

    kernels.install()
    engine = load_engine(opts.cache_dir)
    audio = speak(UTTERANCE)
    for setting in ("off", "on") if opts.kernels == "both" else (opts.kernels,):
        kernels.set_enabled(setting == "on")
        result = profile(engine, audio, opts.repeats)
        print(f"\n### kernels {setting}: {len(audio) / 16000:.2f} s of audio, {result['decoder_calls']} decoder calls")
        print(f"text: {result['text']}\n")
        print(render("encoder", result["encoder"]) + "\n")
        print(render("decode", result["decoder"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
