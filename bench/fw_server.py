"""A small OpenAI-style transcription server around faster-whisper's `WhisperModel` (CTranslate2):
the ASR peer of bench/asr_peers.py. What a Linux user would run instead of this graph (speaches
wraps the same engine).

`python -m bench.fw_server --model DIR [--threads 1] --host H --port P` serves
POST /v1/audio/transcriptions (multipart `file`; JSON `{"text": ...}`) and GET /v1/models.
One model, one CTranslate2 worker with `--threads` intra-op threads: requests are transcribed
one at a time, in arrival order, off the event loop. Decoding matches the graph's: English,
greedy (beam 1), temperature 0 without fallback, timestamps on, no VAD filter, float32.
The audio is decoded with the graph's own decoder (deployments/audio/decode.py).
"""

from __future__ import annotations

import argparse
import asyncio
import threading

RATE = 16000


def decode_options() -> dict:
    """faster-whisper's transcribe() arguments that match the graph's Whisper decoding."""
    return {
        "language": "en",
        "beam_size": 1,
        "temperature": 0.0,
        "condition_on_previous_text": False,
        "vad_filter": False,
        "without_timestamps": False,
    }


def load(model_dir: str, threads: int):
    from faster_whisper import WhisperModel

    return WhisperModel(model_dir, device="cpu", compute_type="float32", cpu_threads=threads, num_workers=1)


def transcribe(model, audio) -> str:
    segments, _ = model.transcribe(audio, **decode_options())
    return "".join(s.text for s in segments).strip()


def app(model):
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from deployments.audio.decode import decode_audio

    lock = threading.Lock()  # one CTranslate2 worker: one transcription at a time

    def run(data: bytes) -> str:
        with lock:
            return transcribe(model, decode_audio(data, RATE))

    async def transcriptions(request):
        form = await request.form()
        upload = form.get("file")
        if upload is None:
            return JSONResponse({"error": {"message": "file is required", "type": "invalid_request_error"}}, 400)
        text = await asyncio.to_thread(run, await upload.read())
        return JSONResponse({"text": text})

    async def models(_request):
        return JSONResponse({"object": "list", "data": [{"id": "whisper-tiny.en", "object": "model"}]})

    return Starlette(
        routes=[
            Route("/v1/audio/transcriptions", transcriptions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
        ]
    )


def main(argv=None) -> None:
    import uvicorn

    p = argparse.ArgumentParser(prog="python -m bench.fw_server", description=__doc__)
    p.add_argument("--model", required=True, help="a CTranslate2 Whisper directory (model.bin)")
    p.add_argument("--threads", type=int, default=1, help="CTranslate2 intra-op threads")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    opts = p.parse_args(argv)
    uvicorn.run(app(load(opts.model, opts.threads)), host=opts.host, port=opts.port, log_level="warning")


if __name__ == "__main__":
    main()
