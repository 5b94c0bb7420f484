"""What the built-in tiny models share: a small byte-level BPE tokenizer (Qwen's kind) trained
on a fixed corpus, and the Qwen3 tokenizer files with its chat template that the tiny LLM and the
tiny image model's text encoder both use. The tiny VLM trains the same tokenizer with its own
special tokens.

Deterministic: the corpus and the training are fixed, so every build writes the same files.
No MLX: only `tokenizers`, imported when a tokenizer is trained.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

QWEN3_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
]
QWEN3_EOS = "<|im_end|>"

_CORPUS_WORDS = (
    "the a an of to in on for with from by about as at into over after before under "
    "model server request response token stream audio speech voice image text chat "
    "replica slot graph batch queue engine thread memory cache load unload ready health "
    "quick brown fox jumps lazy dog river mountain city light music story night morning "
    "is are was were be have has do does can will would should could may might must "
    "red green blue small large fast slow new old good great happy simple clear open "
    "one two three four five six seven eight nine ten hundred thousand first last next "
    "hello world weather today tomorrow function call tool result answer question please"
).split()


def _training_corpus() -> list[str]:
    """A fixed corpus: enough varied English for a small BPE vocabulary."""
    rng = random.Random(1234)
    lines = []
    for _ in range(4000):
        n = rng.randint(4, 14)
        words = [rng.choice(_CORPUS_WORDS) for _ in range(n)]
        lines.append(" ".join(words).capitalize() + rng.choice([".", "?", "!", ","]))
    return lines


def train_bpe_tokenizer(special_tokens: list[str], vocab_size: int):
    """A byte-level BPE tokenizer (Qwen's kind) trained on the fixed corpus; the special tokens
    get the first ids, in order."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_training_corpus(), trainer=trainer)
    return tokenizer


def write_qwen3_tokenizer(out: Path, vocab_size: int, model_max_length: int):
    """tokenizer.json and tokenizer_config.json (Qwen3's special tokens and chat template) in
    `out`; returns the tokenizer."""
    tokenizer = train_bpe_tokenizer(QWEN3_SPECIAL_TOKENS, vocab_size)
    tokenizer.save(str(out / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": model_max_length,
        "bos_token": None,
        "eos_token": QWEN3_EOS,
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": (Path(__file__).parent / "qwen3_chat_template.jinja").read_text(),
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    return tokenizer
