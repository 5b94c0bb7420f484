"""The bad-input corpus for the audio routes and the WebSocket: transcriptions (multipart, raw,
JSON; diarization options), diarization, speech, speech clone, voices, and garbage frames on
/ws/v1/tts.

Each HTTP case expects its 4xx with an OpenAI error body (so no 5xx); each WebSocket case the
documented error event (the session goes on). The ingress refuses most of them itself
(tests/ingress/test_bad_input_audio.py, in process); the ones only a slot can judge (decoding
the audio, the voice registry, the model's limits) are `SLOT_CHECKED` / `WS_SLOT_CHECKED` and
go through the live graph (tests/e2e/test_bad_input_audio.py).
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from deployments.audio.encode import encode_wav
from deployments.tts.tiny_model import TINY_TTS_ID

ASR, TTS = "/v1/audio/transcriptions", "/v1/audio/speech"
CLONE, VOICES = "/v1/audio/speech/clone", "/v1/voices"
CAPTIONED = "/dev/captioned_speech"
DIARIZE = "/v1/audio/diarization"
TINY_ASR = "ominix-tiny-whisper"
TEXT = "Hello there. A short sentence to speak."


def _tone(seconds: float, rate: int = 16000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    return encode_wav((0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), rate)


WAV = _tone(1.0)
B64_WAV = base64.b64encode(WAV).decode()
GARBAGE = [
    b"\x00" * 4096,
    b"RIFF\xff\xff\xff\xffWAVEfmt " + b"\x00" * 64,  # a WAV header that lies
    WAV[:44],  # a header and no samples
    WAV[:30],  # truncated inside the header
    b"\x89PNG\r\n\x1a\n" + b"\x00" * 512,
    b"ID3\x04\x00\x00\x00\x00\x00\x00" + b"\xff" * 300,
    b'{"not": "audio"}',
    bytes(range(256)) * 16,
]
TRAVERSAL = ["/etc/passwd", "/../../etc/shadow", "/proc/self/environ", "//etc/passwd", "/tmp/../etc/hosts", "/dev/zero"]


def _multipart(boundary: str, parts: list[tuple[str, str | None, bytes]], close: bool = True) -> bytes:
    out = b""
    for name, filename, data in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + data + b"\r\n"
    return out + (f"--{boundary}--\r\n".encode() if close else b"")


def case(path, status, id, method="POST", param=None, **request):
    return pytest.param(path, method, request, status, param, id=id)


def transcription_cases():
    cases = []
    form = lambda **data: {"files": {"file": ("a.wav", WAV)}, "data": {"model": TINY_ASR, **data}}  # noqa: E731
    # multipart: the audio part
    cases += [
        case(ASR, 400, "form-no-file", param="file", data={"model": TINY_ASR}),
        case(ASR, 400, "form-file-as-text-field", param="file", data={"file": "hello", "model": TINY_ASR}),
        case(ASR, 400, "form-empty-file", param="file", files={"file": ("a.wav", b"")}),
    ]
    for i, data in enumerate(GARBAGE):
        cases.append(
            case(
                ASR,
                400,
                f"form-undecodable-{i}",
                param="file",
                files={"file": ("a.wav", data)},
                data={"model": TINY_ASR},
            )
        )
    # multipart: the form itself is broken
    truncated = _multipart("xyz", [("model", None, TINY_ASR.encode()), ("file", "a.wav", WAV[:100])], close=False)
    for i, (ctype, body) in enumerate(
        [
            ("multipart/form-data; boundary=xyz", truncated),
            ("multipart/form-data; boundary=xyz", truncated[:30]),
            ("multipart/form-data", _multipart("xyz", [("file", "a.wav", WAV)])),  # no boundary
            ("multipart/form-data; boundary=other", _multipart("xyz", [("file", "a.wav", WAV)])),
            ("multipart/form-data; boundary=xyz", b"--xyz--\r\n"),
            ("multipart/form-data; boundary=xyz", b"\x00\xff" * 100),
        ]
    ):
        cases.append(case(ASR, 400, f"form-broken-{i}", content=body, headers={"content-type": ctype}))
    # multipart: parameters of the wrong type or range
    for field, values in {
        "response_format": ["xml", "", "JSON", "123"],
        "temperature": ["hot", "-1", "5", "nan", "inf", "1e999"],
        "language": ["x" * 33, "fr"],
        "prompt": ["p" * 5000],
        "timestamp_granularities[]": ["char"],
    }.items():
        for i, value in enumerate(values):
            param = None if field.startswith("timestamp") else field  # its param names the list item
            cases.append(case(ASR, 400, f"form-{field}-{i}", param=param, **form(**{field: value})))
    cases.append(
        case(
            ASR,
            400,
            "form-language-fr-on-english-only",
            param="language",
            files={"file": ("a.wav", WAV)},
            data={"language": "fr"},
        )
    )
    for i, model in enumerate(["nope", "m" * 100_000, "org/unknown-repo"]):
        cases.append(case(ASR, 404, f"form-model-{i}", param="model", **form(model=model)))
    for i, model in enumerate(["../../etc/passwd", "/etc/passwd", "~/../../etc"]):  # refused as paths
        cases.append(case(ASR, 400, f"form-model-path-{i}", param="model", **form(model=model)))
    # raw body (MiniInfer form) and wrong content types
    for i, (ctype, body) in enumerate(
        [
            ("audio/wav", b""),
            ("application/octet-stream", b"\x00" * 100),
            ("text/plain", b"hello, this is text"),
            ("image/png", GARBAGE[4]),
            ("application/xml", b"<audio/>"),
            ("application/x-www-form-urlencoded", b"file=abc"),
        ]
    ):
        cases.append(case(ASR, 400, f"raw-{i}", param="file", content=body, headers={"content-type": ctype}))
    cases.append(
        case(
            ASR,
            400,
            "raw-query-temperature",
            param="temperature",
            content=WAV,
            headers={"content-type": "audio/wav"},
            params={"temperature": "abc", "model": TINY_ASR},
        )
    )
    cases.append(
        case(
            ASR,
            400,
            "raw-query-format",
            param="response_format",
            content=WAV,
            headers={"content-type": "audio/wav"},
            params={"response_format": "xml"},
        )
    )
    # JSON (OminiX-API form): broken bodies, wrong types, server paths outside any allowed dir
    for i, raw in enumerate([b"{", b"[]", b"null", b"123", b'"x"', b"\xff\xfe\x00", b"[" * 100_000, b"{'file': 1}"]):
        cases.append(case(ASR, 400, f"json-raw-{i}", content=raw, headers={"content-type": "application/json"}))
    for i, file in enumerate(
        [
            123,
            "",
            [B64_WAV],
            {"data": B64_WAV},
            None,
            "%%% not base64",
            "file:///etc/passwd",
            base64.b64encode(GARBAGE[0]).decode(),
            "data:audio/wav;base64,!!!!",
            "../../etc/passwd",
        ]
    ):
        cases.append(case(ASR, 400, f"json-file-{i}", param="file", json={"file": file, "model": TINY_ASR}))
    for i, path in enumerate(TRAVERSAL):
        cases.append(case(ASR, 400, f"json-server-path-{i}", param="file", json={"file": path, "model": TINY_ASR}))
    for field, values in {
        "temperature": [float("nan"), float("inf"), -1, 2, "hot", [], 1e308],
        "response_format": [5, ["json"], "xml"],
        "language": [5, "x" * 100_000],
        "prompt": ["p" * 100_000, 7],
        "model": [5, ["x"]],
        "timestamp_granularities": ["word", [1], ["char"]],
    }.items():
        for i, value in enumerate(values):
            param = None if field.startswith("timestamp") else field
            cases.append(
                case(
                    ASR, 400, f"json-{field}-{i}", param=param, json={"file": B64_WAV, "model": TINY_ASR, field: value}
                )
            )
    return cases


def _data_url(wav: bytes) -> str:
    return "data:audio/wav;base64," + base64.b64encode(wav).decode()


REFERENCE = _data_url(_tone(2.5))  # a valid known-speaker clip (2-10 s)


def speaker_cases(path: str, base: dict) -> list:
    """Speaker options that are wrong on either diarizing route (`base`: form fields that diarize)."""
    form = lambda **data: {"files": {"file": ("a.wav", WAV)}, "data": {**base, **data}}  # noqa: E731
    names, refs = "known_speaker_names[]", "known_speaker_references[]"
    cases = [
        case(path, 400, "names-without-references", "POST", "known_speaker_names", **form(**{names: ["ann"]})),
        case(path, 400, "references-without-names", "POST", "known_speaker_references", **form(**{refs: [REFERENCE]})),
        case(path, 400, "more-names", "POST", "known_speaker_names", **form(**{names: ["a", "b"], refs: [REFERENCE]})),
        case(
            path,
            400,
            "five-speakers",
            "POST",
            "known_speaker_names",
            **form(**{names: list("abcde"), refs: [REFERENCE] * 5}),
        ),
        case(
            path,
            400,
            "duplicate-names",
            "POST",
            "known_speaker_names",
            **form(**{names: ["a", "a"], refs: [REFERENCE] * 2}),
        ),
        case(path, 400, "blank-name", "POST", "known_speaker_names", **form(**{names: [" "], refs: [REFERENCE]})),
        case(path, 400, "num-speakers-0", "POST", "num_speakers", **form(num_speakers="0")),
        case(path, 400, "num-speakers-word", "POST", "num_speakers", **form(num_speakers="two")),
        case(path, 400, "num-speakers-huge", "POST", "num_speakers", **form(num_speakers="1000")),
        case(path, 400, "count-and-bounds", "POST", "num_speakers", **form(num_speakers="2", max_speakers="3")),
        case(path, 400, "min-above-max", "POST", "min_speakers", **form(min_speakers="3", max_speakers="2")),
    ]
    bad_references = [
        "data:audio/wav;base64,@@not-base64@@",
        "data:audio/wav,plain-text-not-base64",
        "data:audio/wav;base64," + base64.b64encode(b"\x00" * 4096).decode(),  # not audio
        "data:audio/wav;base64," + base64.b64encode(b'{"not": "audio"}').decode(),
        _data_url(_tone(1.0)),  # too short
        _data_url(_tone(10.5)),  # too long
        _data_url(WAV[:44]),  # a header and no samples
    ]
    for i, ref in enumerate(bad_references):
        cases.append(
            case(
                path, 400, f"reference-{i}", "POST", "known_speaker_references", **form(**{names: ["ann"], refs: [ref]})
            )
        )
    return cases


def diarization_cases():
    """The diarizing options on /v1/audio/transcriptions, and /v1/audio/diarization."""
    form = lambda **data: {"files": {"file": ("a.wav", WAV)}, "data": {"model": TINY_ASR, **data}}  # noqa: E731
    cases = [
        case(ASR, 400, "diarize-json", param="response_format", **form(diarize="true")),
        case(ASR, 400, "diarize-text", param="response_format", **form(diarize="1", response_format="text")),
        case(ASR, 400, "diarize-word", param="diarize", **form(diarize="maybe", response_format="verbose_json")),
        case(ASR, 400, "speakers-without-diarize", param="diarize", **form(num_speakers="2")),
        case(
            ASR,
            400,
            "known-without-diarize",
            param="diarize",
            **form(**{"known_speaker_names[]": ["ann"], "known_speaker_references[]": [REFERENCE]}),
        ),
        case(ASR, 400, "raw-diarize-json", param="response_format", params={"diarize": "1"}, content=WAV),
        case(
            ASR,
            400,
            "json-diarize-text",
            param="response_format",
            json={"file": B64_WAV, "diarize": True, "response_format": "text"},
        ),
    ]
    cases += _named("asr", speaker_cases(ASR, {"model": TINY_ASR, "response_format": "diarized_json"}))
    upload = lambda **data: {"files": {"file": ("a.wav", WAV)}, "data": data}  # noqa: E731
    cases += [
        case(DIARIZE, 400, "no-file", param="file", data={"response_format": "json"}),
        case(DIARIZE, 400, "file-as-text-field", param="file", data={"file": "hello"}),
        case(DIARIZE, 400, "raw-empty", param="file", content=b""),
        case(DIARIZE, 400, "format-srt", param="response_format", **upload(response_format="srt")),
        case(DIARIZE, 400, "model-other", param="model", **upload(model="pyannote")),
        case(DIARIZE, 400, "raw-num-speakers", param="num_speakers", params={"num_speakers": "-1"}, content=WAV),
    ]
    cases += _named("diarization", speaker_cases(DIARIZE, {}))
    for i, data in enumerate(GARBAGE[:3]):  # decoded in the ASR slot
        cases.append(case(DIARIZE, 400, f"undecodable-{i}", param="file", files={"file": ("a.wav", data)}))
    return cases


def speech_cases():
    # The tiny pocket_tts is named: its options (no `speed`) and voices are what these cases check.
    good = {"model": TINY_TTS_ID, "input": TEXT, "voice": "alba", "response_format": "pcm"}
    cases = []
    for i, body in enumerate(
        [{"voice": "alba"}, {"input": None}, {"input": 5}, {"input": []}, {"input": {"text": "hi"}}]
    ):
        cases.append(case(TTS, 400, f"input-{i}", param="input", json=body))
    cases.append(case(TTS, 400, "input-too-long", param="input", json={**good, "input": "x" * 4097}))
    cases.append(case(TTS, 400, "input-huge", param="input", json={**good, "input": "word " * 200_000}))
    for i, voice in enumerate(
        [
            "nobody",
            "../../etc/passwd",
            "/etc/passwd",
            "..\\..\\windows\\win.ini",
            "alba/../../x",
            "%2e%2e%2fetc",
            "v" * 10_000,
            "alba\x00.wav",
            "~/.ssh/id_rsa",
        ]
    ):
        cases.append(case(TTS, 404, f"voice-{i}", param="voice", json={**good, "voice": voice}))
    cases.append(case(TTS, 400, "voice-not-a-string", param="voice", json={**good, "voice": 5}))
    for i, speed in enumerate([0, -1, 5, "fast", float("nan"), float("inf"), [], 1.5]):
        cases.append(case(TTS, 400, f"speed-{i}", param="speed", json={**good, "speed": speed}))
    for i, fmt in enumerate(["xml", 5, "", "WAVE", ["wav"]]):
        cases.append(case(TTS, 400, f"format-{i}", param="response_format", json={**good, "response_format": fmt}))
    cases.append(case(TTS, 400, "query-format", param="format", json=good, params={"format": "xml"}))
    cases.append(case(TTS, 400, "stream-not-bool", param="stream", json={**good, "stream": "maybe"}))
    cases.append(
        case(TTS, 400, "sse-with-wav", param="response_format", json={**good, "stream": True, "response_format": "wav"})
    )
    cases.append(case(TTS, 400, "stream-format", param="stream_format", json={**good, "stream_format": "websocket"}))
    cases.append(case(TTS, 404, "model-unknown", param="model", json={**good, "model": "nope"}))
    cases.append(case(TTS, 400, "model-not-a-string", param="model", json={**good, "model": 5}))
    cases.append(case(TTS, 400, "model-path-traversal", param="model", json={**good, "model": "../../etc/passwd"}))
    cases.append(case(TTS, 400, "instruct-unsupported", param="instruct", json={**good, "instruct": "whisper it"}))
    cases.append(case(TTS, 400, "language-not-a-string", param="language", json={**good, "language": 5}))
    for i, ref in enumerate(["%%%", base64.b64encode(GARBAGE[0]).decode(), 5, base64.b64encode(b"").decode() + "x"]):
        cases.append(case(TTS, 400, f"reference-{i}", param="reference_audio", json={**good, "reference_audio": ref}))
    for i, raw in enumerate([b"", b"{", b"[]", b"null", b"\xff\xfe", b"[" * 100_000, b'{"input": "a"']):
        cases.append(case(TTS, 400, f"raw-{i}", content=raw, headers={"content-type": "application/json"}))
    cases.append(case(TTS, 400, "form-instead-of-json", data={"input": TEXT}))
    return cases


def captioned_cases():
    # The tiny pocket_tts times no words: the slot's 400 names `return_timestamps`.
    good = {"model": TINY_TTS_ID, "input": TEXT, "voice": "alba", "stream": False}
    return [
        case(CAPTIONED, 400, "input-missing", param="input", json={"voice": "alba"}),
        case(CAPTIONED, 400, "stream-format", param="stream_format", json={**good, "stream_format": "sse"}),
        case(
            CAPTIONED, 400, "timestamps-not-bool", param="return_timestamps", json={**good, "return_timestamps": "yes"}
        ),
        case(CAPTIONED, 400, "format", param="response_format", json={**good, "response_format": "xml"}),
        case(CAPTIONED, 400, "untimed-model", param="return_timestamps", json=good),
    ]


def clone_cases():
    ref = ("ref.wav", _tone(1.0, 22050))
    good_files, good_data = {"reference_audio": ref}, {"input": TEXT}
    return [
        case(CLONE, 400, "no-input", param="input", files=good_files),
        case(CLONE, 400, "no-reference", param="reference_audio", data=good_data),
        case(CLONE, 400, "reference-as-text", param="reference_audio", data={**good_data, "reference_audio": "abc"}),
        case(
            CLONE,
            400,
            "reference-empty",
            param="reference_audio",
            files={"reference_audio": ("r.wav", b"")},
            data=good_data,
        ),
        *[
            case(
                CLONE,
                400,
                f"reference-garbage-{i}",
                param="reference_audio",
                files={"reference_audio": ("r.wav", g)},
                data=good_data,
            )
            for i, g in enumerate(GARBAGE[:4])
        ],
        case(
            CLONE,
            400,
            "reference-too-short",
            param="reference_audio",
            files={"reference_audio": ("r.wav", _tone(0.01))},
            data=good_data,
        ),
        case(CLONE, 400, "speed-text", param="speed", files=good_files, data={**good_data, "speed": "fast"}),
        case(CLONE, 400, "speed-zero", param="speed", files=good_files, data={**good_data, "speed": "0"}),
        case(
            CLONE,
            400,
            "format",
            param="response_format",
            files=good_files,
            data={**good_data, "response_format": "xml"},
        ),
        case(CLONE, 404, "model", param="model", files=good_files, data={**good_data, "model": "nope"}),
        case(CLONE, 400, "input-too-long", param="input", files=good_files, data={"input": "x" * 5000}),
        case(CLONE, 400, "json-instead-of-form", json={"input": TEXT, "reference_audio": B64_WAV}),
        case(
            CLONE,
            400,
            "truncated-form",
            content=_multipart("b", [("input", None, b"hi")], close=False)[:20],
            headers={"content-type": "multipart/form-data; boundary=b"},
        ),
    ]


def voice_cases():
    audio = {"reference_audio": ("v.wav", _tone(1.0, 22050))}
    cases = [
        case(f"{VOICES}/nobody", 404, "delete-unknown", method="DELETE", param="name"),
        case(f"{VOICES}/alba", 404, "delete-preset", method="DELETE", param="name"),
        case(f"{VOICES}/..%2F..%2Fetc%2Fpasswd", 404, "delete-traversal", method="DELETE"),  # matches no route
        case(f"{VOICES}/%00", 404, "delete-nul", method="DELETE", param="name"),
        case(f"{VOICES}/alba", 405, "get-one", method="GET"),
        case(VOICES, 405, "put", method="PUT"),
        case(VOICES, 400, "no-name", param="name", files=audio),
        case(VOICES, 400, "no-audio", param="reference_audio", data={"name": "fresh"}),
        case(
            VOICES,
            400,
            "empty-audio",
            param="reference_audio",
            files={"reference_audio": ("v.wav", b"")},
            data={"name": "fresh"},
        ),
        case(
            VOICES,
            400,
            "garbage-audio",
            param="reference_audio",
            files={"reference_audio": ("v.wav", GARBAGE[0])},
            data={"name": "fresh"},
        ),
        case(VOICES, 400, "preset-name", param="name", files=audio, data={"name": "af_heart"}),  # the default's
        case(VOICES, 400, "json-instead-of-form", json={"name": "fresh"}),
    ]
    for i, name in enumerate(["../evil", "a/b", "", " ", "x" * 65, ".hidden", "default", "..", "a\\b", "名前", "a b"]):
        cases.append(case(VOICES, 400, f"bad-name-{i}", param="name", files=audio, data={"name": name}))
    for i, alias in enumerate(["../x", "a/b", "default"]):
        cases.append(
            case(VOICES, 400, f"bad-alias-{i}", param="name", files=audio, data={"name": "fresh", "aliases": alias})
        )
    return cases


def _named(prefix: str, cases: list) -> list:
    """Case ids unique across the routes (both the speech and the ASR corpus have a raw-1)."""
    return [pytest.param(*case.values, id=f"{prefix}-{case.id}") for case in cases]


HTTP_CASES = (
    _named("asr", transcription_cases())
    + _named("diarize", diarization_cases())
    + _named("speech", speech_cases())
    + _named("clone", clone_cases())
    + _named("captioned", captioned_cases())
    + _named("voices", voice_cases())
)

# WebSocket: (frame to send, the start of the error event's message). str frames go as text,
# bytes as binary; None means the documented answer is not an error (see the test).
WS_CASES = [
    (b"\x00\x01\x02", "Binary frames are not supported"),
    (json.dumps({"event": "task_start"}).encode(), "Binary frames are not supported"),  # JSON, but binary
    ("", "Invalid JSON"),
    ("{not json", "Invalid JSON"),
    ("\x00\x00", "Invalid JSON"),
    ("[" * 100_000, "Invalid JSON"),
    ('{"event": "task_start"', "Invalid JSON"),
    ("null", "Missing 'event' field"),
    ("[]", "Missing 'event' field"),
    ("123", "Missing 'event' field"),
    ('"task_start"', "Missing 'event' field"),
    ({"event": None}, "Missing 'event' field"),
    ({"event": ["task_start"]}, "Missing 'event' field"),
    ({"event": {"name": "task_start"}}, "Missing 'event' field"),
    ({"event": ""}, "Unknown event: "),
    ({"event": "TASK_START"}, "Unknown event: TASK_START"),
    ({"event": "task_cancel"}, "Unknown event: task_cancel"),
    ({"event": "x" * 10_000}, "Unknown event: x"),
    ({"event": "task_continue"}, "Missing 'text' field"),
    ({"event": "task_continue", "text": None}, "Missing 'text' field"),
    ({"event": "task_continue", "text": ["a"]}, "Missing 'text' field"),
    ({"event": "task_continue", "text": "hi there", "voice_id": 5}, "'voice_id' must be a string"),
    (
        {"event": "task_continue", "text": "hi there", "voice_id": "../../etc/passwd"},
        "TTS error: Voice '../../etc/passwd' is not available",
    ),
    (
        {"event": "task_continue", "text": "hi there", "voice_id": "/etc/passwd"},
        "TTS error: Voice '/etc/passwd' is not available",
    ),
    ({"event": "task_continue", "text": "x" * 4097}, "Text too long: 4097 characters"),
    ({"event": "task_continue", "text": "x" * 1_000_000}, "Text too long: 1000000 characters"),
    ({"event": "task_start", "voice_setting": "alba"}, "'voice_setting' must be an object"),
    ({"event": "task_start", "voice_setting": ["alba"]}, "'voice_setting' must be an object"),
    ({"event": "task_start", "audio_setting": "pcm"}, "'audio_setting' must be an object"),
    ({"event": "task_start", "voice_setting": {"voice_id": 5}}, "'voice_setting.voice_id' must be a string"),
    ({"event": "task_start", "voice_setting": {"language": ["en"]}}, "'voice_setting.language' must be a string"),
    ({"event": "task_start", "voice_setting": {"speed": "fast"}}, "voice_setting.speed must be"),
    ({"event": "task_start", "voice_setting": {"speed": True}}, "voice_setting.speed must be"),
    ({"event": "task_start", "voice_setting": {"speed": -1}}, "voice_setting.speed must be"),
    ('{"event": "task_start", "voice_setting": {"speed": NaN}}', "voice_setting.speed must be"),
    ('{"event": "task_start", "voice_setting": {"speed": Infinity}}', "voice_setting.speed must be"),
    ({"event": "task_start", "audio_setting": {"format": "aac"}}, "Unsupported audio format: aac"),
    ({"event": "task_start", "audio_setting": {"format": None}}, "Unsupported audio format: none"),
    ({"event": "task_start", "audio_setting": {"format": "../wav"}}, "Unsupported audio format: ../wav"),
    ({"event": "task_start", "model": 5}, "'model' must be a string"),
    ({"event": "task_start", "model": "nope"}, "TTS error: The model 'nope' does not exist"),
    (
        {"event": "task_start", "model": "../../etc/passwd"},
        "TTS error: Model path contains invalid directory traversal",
    ),
    ({"event": "task_start", "model": "/etc/passwd"}, "TTS error: Model path '/etc/passwd' is outside"),
]
WS_MAX_FRAME = 16 * 1024 * 1024  # uvicorn's ws_max_size, which Serve's proxy uses

# Only a slot can refuse these: the audio itself (decoding, length), server files, the voice
# registry and presets, the model's limits and options (measured: these are the cases that
# pass the ingress; tests/ingress/test_bad_input_audio.py keeps the list honest).
SLOT_CHECKED = frozenset(
    {
        # sent without a multipart body (no file part): the raw-body form, decoded in the slot
        "asr-form-no-file",
        "asr-form-file-as-text-field",
        "asr-form-empty-file",
        *(f"asr-form-undecodable-{i}" for i in range(len(GARBAGE))),
        "asr-form-language-1",
        "asr-form-language-fr-on-english-only",
        *(f"asr-raw-{i}" for i in range(1, 6)),
        "asr-json-file-7",
        *(f"diarize-undecodable-{i}" for i in range(3)),
        "diarize-no-file",  # a url-encoded form is a raw body, as on the transcription route
        "diarize-file-as-text-field",
        *(f"asr-json-server-path-{i}" for i in range(len(TRAVERSAL))),
        "speech-input-too-long",
        "speech-input-huge",
        *(f"speech-voice-{i}" for i in range(9)),
        "speech-speed-7",
        "speech-instruct-unsupported",
        "speech-reference-1",
        *(f"clone-reference-garbage-{i}" for i in range(4)),
        "clone-reference-too-short",
        "clone-input-too-long",
        "captioned-untimed-model",
        "voices-delete-unknown",
        "voices-delete-preset",
        "voices-delete-nul",
        "voices-garbage-audio",
        "voices-preset-name",
        *(f"voices-bad-name-{i}" for i in (0, 1, 3, 4, 5, 6, 7, 8, 9, 10)),
        *(f"voices-bad-alias-{i}" for i in range(3)),
    }
)
# WebSocket cases (by index) whose error only the TTS slot can give: unknown voices.
WS_SLOT_CHECKED = frozenset({22, 23})


def request_of(request_kwargs: dict) -> dict:
    """httpx request arguments for a case (NaN/Infinity as Python writes them: httpx refuses to)."""
    if "json" not in request_kwargs:
        return request_kwargs
    rest = {k: v for k, v in request_kwargs.items() if k != "json"}
    return {
        **rest,
        "content": json.dumps(request_kwargs["json"]).encode(),
        "headers": {"content-type": "application/json"},
    }


def ws_frame(frame) -> str | bytes:
    return frame if isinstance(frame, (str, bytes)) else json.dumps(frame)
