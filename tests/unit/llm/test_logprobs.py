"""Token ids to the bytes they stand for, in each tokenizer family mlx-lm knows."""

from __future__ import annotations

from types import SimpleNamespace

from deployments.generation.logprobs import TokenBytes, entry


def test_byte_level_bpe_tokens_give_back_the_text_byte_for_byte(tiny_tokenizer):
    token_bytes = TokenBytes(tiny_tokenizer)
    text = "Hello wörld, 日本 ✓"
    ids = tiny_tokenizer.encode(text, add_special_tokens=False)
    assert b"".join(token_bytes(t) for t in ids).decode() == text
    eos = tiny_tokenizer.eos_token_id
    assert token_bytes(eos).decode() == tiny_tokenizer.convert_ids_to_tokens(eos)  # added tokens: their text
    assert token_bytes(len(tiny_tokenizer) + 5) == b"!"  # a padded id: as mlx-lm's detokenizer writes it


def test_sentencepiece_pieces_and_byte_fallback():
    spm = SimpleNamespace(detokenizer=SimpleNamespace(tokenmap=["\u2581Hello".encode(), bytes([0xE2]), b"x"]))
    token_bytes = TokenBytes(spm)
    assert [token_bytes(i) for i in range(3)] == [b" Hello", b"\xe2", b"x"]


def test_other_tokenizers_decode_each_token_alone():
    naive = SimpleNamespace(detokenizer=SimpleNamespace(), decode=lambda ids: f"<{ids[0]}>")
    assert TokenBytes(naive)(7) == b"<7>"
    e = entry(TokenBytes(naive), 7, -0.5, [(3, -0.1), (7, -0.5)], keep=1)
    assert (e.token, e.logprob, [t.token for t in e.top_logprobs]) == ("<7>", -0.5, ["<3>"])
