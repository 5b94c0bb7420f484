"""The peer of bench/engine.py on an NVIDIA GPU: Hugging Face transformers' `generate()` on the
same smoke-size Qwen3 (bench/model.py `SMOKE_CONFIG`, its safetensors loaded as
Qwen3ForCausalLM), the same prompts (`bench.engine.prompts`), greedy, every sequence generating
exactly `tokens` tokens, `streams` sequences in one left-padded batch, bfloat16 on the GPU.
Reports tokens/s and the wall and host time per step, as bench/engine.py does for its systems;
the GPU check runs both (bench/device_check.sh, docs/performance.md "The GPU check").

Needs PyTorch (the GPU machine's own; this project installs none), so neither CI nor the
development machine runs it.

    python -m bench.transformers_peer [--streams 1,16,64] [--tokens 128] [--repeats 3]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from bench.engine import arguments, per_step

ROOT = Path(__file__).resolve().parents[1]


def left_padded(prompts: list[list[int]], pad: int) -> tuple[list[list[int]], list[list[int]]]:
    """The prompts as one batch, padded on the left (generation appends on the right), and the
    attention mask that hides the padding."""
    width = max(len(p) for p in prompts)
    ids = [[pad] * (width - len(p)) + list(p) for p in prompts]
    mask = [[0] * (width - len(p)) + [1] * len(p) for p in prompts]
    return ids, mask


def run_generate(model, tokenizer, streams: int, tokens: int, tag: str, device: str) -> dict:
    import torch

    from bench.engine import prompts

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids, mask = left_padded(prompts(tokenizer, streams, tag), pad)
    input_ids = torch.tensor(ids, device=device)
    attention = torch.tensor(mask, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    cpu0, t0 = time.thread_time(), time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            input_ids=input_ids,
            attention_mask=attention,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            do_sample=False,
            pad_token_id=pad,
        )
    sync()
    wall, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
    new = out.shape[1] - input_ids.shape[1]
    return per_step(new * streams, new, wall, cpu)


def measure(cache_dir: Path, streams: list[int], tokens: int, repeats: int, progress) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bench.model import SMOKE_CONFIG, ensure_bench_model
    from bench.stats import median

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model_dir = ensure_bench_model(cache_dir, SMOKE_CONFIG)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.bfloat16).to(device).eval()
    for warm in range(2):  # first shapes, the CUDA context, cuBLAS's handles
        run_generate(model, tokenizer, 4, 8, f"warm{warm} ", device)
    levels = {}
    for n in streams:
        runs = [run_generate(model, tokenizer, n, tokens, f"{n}/{rep} ", device) for rep in range(repeats)]
        levels[str(n)] = {k: median(r[k] for r in runs) for k in runs[0]}
        progress(f"transformers: {n} streams: {levels[str(n)]['tokens_per_s']:.0f} tok/s")
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    return {
        "model": model_dir.name,
        "device": name,
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "tokens": tokens,
        "levels": levels,
    }


def render(result: dict) -> str:
    from bench.report import table

    rows = [[n, m["tokens_per_s"], m["host_ms_per_step"], m["wall_ms_per_step"]] for n, m in result["levels"].items()]
    head = f"transformers {result['transformers']} generate() on {result['device']} (torch {result['torch']}), bfloat16"
    return head + "\n\n" + table(["streams", "tok/s", "host ms/step", "wall ms/step"], rows)


def main(argv=None) -> int:
    opts = arguments("bench.transformers_peer", __doc__, repeats=3).parse_args(argv)
    from bench.report import run_standalone, save_standalone

    result = run_standalone(
        "bench.transformers_peer",
        argv,
        lambda progress: measure(opts.cache_dir, opts.streams, opts.tokens, opts.repeats, progress),
    )
    save_standalone(opts.out, "transformers_peer", result, render(result))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
