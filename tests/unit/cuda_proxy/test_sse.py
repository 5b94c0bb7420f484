"""The strict SSE decoder for the worker's stream: same payloads at every byte split."""

import pytest

from deployments.cuda_proxy.sse import SSEDecodeError, SSEDecoder

# LF frames, CRLF frames, a comment, a multi-line data frame, a frame without data, an
# `event:` field, no space after the colon, and a mixed `\r\n\n` ending.
STREAM = (
    b": hello\n\n"
    b'data: {"a":1}\n\n'
    b'data: {"b":2}\r\n\r\n'
    b"event: ping\n\n"
    b"data: line one\ndata:line two\r\ndata:  two spaces\n\n"
    b"id: 7\ndata: [DONE]\r\n\n"
    b"data: caf\xc3\xa9\n\n"
)
EXPECTED = ['{"a":1}', '{"b":2}', "line one\nline two\n two spaces", "[DONE]", "café"]


def decode(pieces):
    decoder = SSEDecoder()
    out = []
    for piece in pieces:
        out += decoder.feed(piece)
    decoder.finish()
    return out


def test_whole_stream():
    assert decode([STREAM]) == EXPECTED


@pytest.mark.parametrize("split", range(1, len(STREAM)))
def test_every_single_split(split):
    assert decode([STREAM[:split], STREAM[split:]]) == EXPECTED


def test_every_pair_of_splits():
    # All two-cut splits, so every separator is cut in every possible way.
    n = len(STREAM)
    for i in range(1, n):
        for j in range(i, n):
            assert decode([STREAM[:i], STREAM[i:j], STREAM[j:]]) == EXPECTED, (i, j)


def test_byte_by_byte():
    assert decode([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


def test_first_separator_wins():
    # "\n\n" comes before the "\r\n\r\n" that follows: two frames, not one.
    assert decode([b"data: a\n\ndata: b\r\n\r\n"]) == ["a", "b"]
    assert decode([b"data: a\r\n\r\ndata: b\n\n"]) == ["a", "b"]


def test_bare_cr_does_not_end_a_frame():
    # "\r\r" is not a separator this protocol accepts.
    assert decode([b"data: a\r\rdata: b\n\n"]) == ["a\r\rdata: b"]


def test_non_utf8_frame_is_an_error():
    with pytest.raises(SSEDecodeError, match="UTF-8"):
        SSEDecoder().feed(b"data: \xff\n\n")


def test_utf8_split_across_pieces_is_fine():
    data = "data: é\n\n".encode()
    assert decode([data[:7], data[7:]]) == ["é"]


def test_leftover_at_end_is_an_error_but_whitespace_is_not():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: [DONE]") == []
    with pytest.raises(SSEDecodeError, match="unterminated"):
        decoder.finish()
    decoder = SSEDecoder()
    decoder.feed(b"data: x\n\n \r\n")
    decoder.finish()


def test_frame_size_limit():
    decoder = SSEDecoder(max_frame_bytes=16)
    assert decoder.feed(b"data: 0123456789\n\n") == ["0123456789"]
    with pytest.raises(SSEDecodeError, match="larger"):
        decoder.feed(b"data: " + b"x" * 20)
    with pytest.raises(SSEDecodeError, match="larger"):
        SSEDecoder(max_frame_bytes=16).feed(b"data: " + b"x" * 20 + b"\n\n")
