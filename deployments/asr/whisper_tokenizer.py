"""mlx-audio's Whisper tokenizer, memoized per model.

`model.get_tokenizer()` builds a new `HFTokenizerWrapper` on every call (each decode, each
window's segments), and the wrapper's properties are recomputed on every access: `no_speech`
builds the whole 51,864-entry vocabulary dict (`get_vocab()`) each time, and the decode loop's
logit filters read `timestamp_begin`, `eot` and `sot` every step. py-spy on one 4 s decode put
half of its samples in `get_vocab` (docs/performance.md, "Profiles"). The wrapper's state
(tokenizer, language, task) never changes after construction, so here each (language, task)
gets one wrapper whose properties are computed once: the same values, nothing else changes.

No Ray; pure Python around the loaded model.
"""

from __future__ import annotations

from functools import cache, cached_property
from typing import Any


@cache
def cached_wrapper_class() -> type:
    """HFTokenizerWrapper with every property computed once per instance."""
    from mlx_audio.stt.models.whisper.whisper import HFTokenizerWrapper

    memoized = {
        name: cached_property(value.fget)
        for name, value in vars(HFTokenizerWrapper).items()
        if isinstance(value, property)
    }
    return type("CachedTokenizerWrapper", (HFTokenizerWrapper,), memoized)


def memoize_tokenizers(model: Any) -> None:
    """Make `model.get_tokenizer(language, task)` return one memoized wrapper per argument pair."""
    build = model.get_tokenizer
    if getattr(build, "memoized", False):
        return
    wrappers: dict = {}

    def get_tokenizer(language: str = None, task: str = "transcribe"):
        key = (language, task)
        if key not in wrappers:
            wrapper = build(language=language, task=task)
            wrapper.__class__ = cached_wrapper_class()  # same state, memoized properties
            wrappers[key] = wrapper
        return wrappers[key]

    get_tokenizer.memoized = True
    model.get_tokenizer = get_tokenizer
