"""The speech route's audio bytes leave as the slot makes the audio (`audio_response`,
deployments/ingress/serving/speech.py): pcm, wav, mp3 and opus a chunk at a time, flac whole."""

from __future__ import annotations

import asyncio
import io

import numpy as np
import pytest
import soundfile as sf
from fastapi.responses import StreamingResponse

from deployments.ingress.serving.speech import audio_response

RATE = 24000


class SlowSpeech:
    """A SpeechStream's `audio()`: three 0.3 s chunks, each logged as it is made."""

    sample_rate = RATE

    def __init__(self, log: list):
        self.log = log

    async def audio(self):
        for i in range(3):
            await asyncio.sleep(0.01)
            self.log.append(("made", i))
            t = np.arange(i * 7200, (i + 1) * 7200) / RATE
            yield (0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32)


@pytest.mark.parametrize("fmt", ["pcm", "wav", "mp3", "opus"])
async def test_each_chunk_is_sent_before_the_next_is_made(fmt):
    log: list = []
    response = await audio_response(SlowSpeech(log), fmt)
    assert isinstance(response, StreamingResponse) and response.headers["x-audio-sample-rate"] == str(RATE)
    body = b""
    async for part in response.body_iterator:
        if part:
            log.append(("sent", len(part)))
            body += part
    made = [i for i, (what, _) in enumerate(log) if what == "made"]
    # bytes go out between the chunks, not all after the last one
    assert all(log[i + 1][0] == "sent" for i in made), log
    if fmt in ("wav", "mp3", "opus"):
        decoded, rate = sf.read(io.BytesIO(body), dtype="float32")
        assert rate == RATE and abs(decoded.size - 3 * 7200) < 0.1 * RATE


async def test_flac_is_encoded_whole():
    log: list = []
    response = await audio_response(SlowSpeech(log), "flac")
    assert not isinstance(response, StreamingResponse)
    assert [what for what, _ in log] == ["made"] * 3
    assert sf.info(io.BytesIO(response.body)).frames == 3 * 7200
