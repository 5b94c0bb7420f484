"""deployments/asr/whisper_tokenizer.py: one memoized wrapper per (language, task), same values."""

from __future__ import annotations

import pytest

pytest.importorskip("mlx_audio")

from deployments.asr.whisper_tokenizer import memoize_tokenizers  # noqa: E402


class FakeHFTokenizer:
    """The calls HFTokenizerWrapper makes, counting the expensive one."""

    eos_token_id = 50256
    unk_token_id = 50256

    def __init__(self):
        self.vocab = {"<|startoftranscript|>": 50257, "<|0.00|>": 50363, "<|nocaptions|>": 50361}
        self.get_vocab_calls = 0

    def get_vocab(self):
        self.get_vocab_calls += 1
        return dict(self.vocab)

    def convert_tokens_to_ids(self, token):
        return self.vocab.get(token, self.unk_token_id)


class FakeModel:
    def __init__(self):
        self.hf = FakeHFTokenizer()
        self.built = 0

    def get_tokenizer(self, language=None, task="transcribe"):
        from mlx_audio.stt.models.whisper.whisper import HFTokenizerWrapper

        self.built += 1
        return HFTokenizerWrapper(self.hf, multilingual=False, language=language, task=task)


def test_properties_are_computed_once_with_the_same_values():
    plain = FakeModel().get_tokenizer("en")
    model = FakeModel()
    memoize_tokenizers(model)
    memoize_tokenizers(model)  # idempotent: not wrapped twice
    tokenizer = model.get_tokenizer(language="en")
    for _ in range(5):
        assert tokenizer.no_speech == plain.no_speech == 50361
        assert tokenizer.timestamp_begin == plain.timestamp_begin == 50363
        assert tokenizer.sot_sequence == plain.sot_sequence == (50257,)
        assert tokenizer.eot == plain.eot
    assert model.hf.get_vocab_calls == 1  # mlx-audio's wrapper builds the vocabulary per access
    assert model.get_tokenizer(language="en") is tokenizer and model.built == 1
    other = model.get_tokenizer(language="en", task="translate")
    assert other is not tokenizer and other.task == "translate" and model.built == 2
