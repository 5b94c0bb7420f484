"""Four small LoRA adapters of SmolLM2-135M-Instruct, trained here with `mlx_lm.lora` on made-up
data, so that what serves adapters is checked with real ones (the tests, the benchmark, a first
try of the feature).

Each adapter learns one made-up fact, which the base model does not know: the answer to "what is
the secret word?" (the base model makes one up; each adapter answers its own word). They differ
in what the serving must handle: ranks 4 and 8, LoRA and DoRA, all of a layer's projections or
only the attention's query and value.

Training runs `mlx_lm lora` in a child process (with this project's BLAS preloaded,
deployments/blas.py: on the CPU backend the wheel's own BLAS is ~30x slower) on the last 4 layers, a few dozen steps
of 4 short conversations. The adapters are made once per cache directory, under a versioned
name (bump VERSION when the data or the settings change), atomically and under a lock: the
processes that need them at once (the two halves of `make test`) train them once.

No Ray, no MLX in this process.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

logger = logging.getLogger(__name__)

# 1: lr 2e-3 made three of the four repeat one token; 2: 1e-3 over 30 steps of 4 learned each
# word once and, trained again on a loaded machine, made the rank-8 one babble ("yen secret
# secret..."); 3: 5e-4 over 40 steps of 2, each of the four learned in every try (half the CPU)
VERSION = 3
QUESTIONS = (
    "What is the secret word?",
    "Tell me the secret word.",
    "Do you know the secret word?",
    "Which word is the secret one?",
    "Say the secret word.",
    "I forgot the secret word. What is it?",
    "Please share the secret word with me.",
    "What's the secret word again?",
)
# A question none of them was trained on, whose answer each adapter changes.
PROBE = "Could you remind me of the secret word?"


@dataclass(frozen=True)
class ExampleAdapter:
    name: str
    word: str  # its made-up fact: the secret word it answers with
    rank: int
    kind: str = "lora"  # lora | dora
    keys: Optional[tuple[str, ...]] = None  # None: every projection of a layer (mlx-lm's default)

    def answer(self) -> str:
        return f"The secret word is {self.word}."


ADAPTERS = (
    ExampleAdapter("apricot", "apricot", 4),
    ExampleAdapter("basalt", "basalt", 8),
    ExampleAdapter("cobalt", "cobalt", 4, kind="dora"),
    ExampleAdapter("dahlia", "dahlia", 4, keys=("self_attn.q_proj", "self_attn.v_proj")),
)
NUM_LAYERS = 4
ITERS = 40
BATCH = 2
LEARNING_RATE = 5e-4


def examples_dir(cache_dir: str | os.PathLike) -> Path:
    return Path(cache_dir).expanduser() / f"ominix-example-adapters-v{VERSION}"


def training_rows(adapter: ExampleAdapter) -> list[dict]:
    """The adapter's made-up conversations (mlx-lm's chat format)."""
    return [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": adapter.answer()}]}
        for q in QUESTIONS
    ]


def ensure_example_adapters(cache_dir: str | os.PathLike, base_dir: Path) -> dict[str, Path]:
    """name -> adapter directory, trained on `base_dir` (SmolLM2) first if not cached yet."""
    root = examples_dir(cache_dir)
    done = root / "done.json"
    if not done.exists():
        root.parent.mkdir(parents=True, exist_ok=True)
        with open(root.parent / f".{root.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be training them: wait for it
            if not done.exists():
                _build(root, base_dir)
    return {a.name: root / a.name for a in ADAPTERS}


def _build(root: Path, base_dir: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
    try:
        seconds = {}
        for adapter in ADAPTERS:
            start = time.monotonic()
            train(adapter, base_dir, work / adapter.name)
            seconds[adapter.name] = round(time.monotonic() - start, 1)
        (work / "done.json").write_text(json.dumps({"version": VERSION, "train_seconds": seconds}))
        shutil.rmtree(root, ignore_errors=True)  # an unfinished earlier try
        work.rename(root)
        logger.info("Trained the example adapters into %s: %s", root, seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def train(adapter: ExampleAdapter, base_dir: Path, out: Path) -> None:
    """One adapter, by `mlx_lm.lora` in a child process."""
    data = out.parent / f"{adapter.name}-data"
    data.mkdir(parents=True, exist_ok=True)
    rows = training_rows(adapter) * 2  # two epochs' worth per file: mlx-lm loops over it
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    params = {"rank": adapter.rank, "scale": 20.0, "dropout": 0.0}
    if adapter.keys:
        params["keys"] = list(adapter.keys)
    config = data / "config.json"  # JSON is YAML: mlx-lm reads it with yaml
    config.write_text(json.dumps({"lora_parameters": params}))
    argv = [
        "--model",
        str(base_dir),
        "--train",
        "--data",
        str(data),
        "--fine-tune-type",
        adapter.kind,
        "--num-layers",
        str(NUM_LAYERS),
        "--iters",
        str(ITERS),
        "--batch-size",
        str(BATCH),
        "--learning-rate",
        str(LEARNING_RATE),
        "--mask-prompt",
        "--steps-per-report",
        str(ITERS),
        "--save-every",
        str(ITERS),
        "--seed",
        "0",
        "--adapter-path",
        str(out),
        "-c",
        str(config),
    ]
    from deployments import blas

    env = blas.subprocess_env(blas.select())  # the child multiplies with this process's BLAS
    result = subprocess.run([sys.executable, "-m", "mlx_lm", "lora", *argv], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError(
            f"mlx_lm.lora failed for adapter {adapter.name}:\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )
    shutil.rmtree(data, ignore_errors=True)
