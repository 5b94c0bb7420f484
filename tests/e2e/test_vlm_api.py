"""The VLM slot on the session graph, through the openai SDK: image chat routed by the model
id (streaming and not, with logprobs), OminiX-API's /v1/vlm/completions with real token counts, bad images a
400 that leaves the replica serving; both new slots (VLM, embeddings) in the control plane."""

from __future__ import annotations

import base64
import io

import openai
import pytest
from PIL import Image

from deployments.embeddings.minilm import MINILM_ID
from deployments.vlm.tiny_model import TINY_VLM_ID

LLM = "ominix-tiny-qwen3"


def png(width: int = 112, height: int = 112) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (30, 160, 60)).save(out, "PNG")
    return out.getvalue()


def image_message(*images: bytes, text: str = "What is in the picture?") -> list[dict]:
    parts = [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{base64.b64encode(i).decode()}"}}
        for i in images
    ]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


def test_image_chat_goes_to_the_vlm_and_counts_its_image_tokens(client):
    text_only = client.chat.completions.create(model=TINY_VLM_ID, messages=image_message(), max_tokens=4, temperature=0)
    one = client.chat.completions.create(model=TINY_VLM_ID, messages=image_message(png()), max_tokens=4, temperature=0)
    assert one.model == TINY_VLM_ID and one.choices[0].message.content
    assert one.choices[0].finish_reason == "length" and one.usage.completion_tokens == 4
    # A 112x112 image is 16 merged patches plus the vision start and end tokens.
    assert one.usage.prompt_tokens - text_only.usage.prompt_tokens == 18


def test_streaming_image_chat_matches_the_whole_answer(client):
    whole = client.chat.completions.create(
        model=TINY_VLM_ID, messages=image_message(png(), png(56, 56)), max_tokens=6, temperature=0
    )
    stream = client.chat.completions.create(
        model=TINY_VLM_ID,
        messages=image_message(png(), png(56, 56)),
        max_tokens=6,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_image_chat_choices_and_logprobs_through_the_sdk(client):
    """n choices, each token with its log-probability and the likeliest others (greedy: the
    chosen one is the first of them, and both choices are the same answer)."""
    answer = client.chat.completions.create(
        model=TINY_VLM_ID,
        messages=image_message(png()),
        max_tokens=4,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
        n=2,
    )
    first, second = answer.choices
    assert (first.index, second.index) == (0, 1) and first.message.content == second.message.content
    entries = first.logprobs.content
    assert len(entries) == 4 and answer.usage.completion_tokens == 8
    assert all(e.top_logprobs[0].token == e.token and e.logprob <= 0 and len(e.top_logprobs) == 2 for e in entries)


def test_vlm_completions_in_ominix_shape(http):
    body = {"image": base64.b64encode(png()).decode(), "prompt": "Describe the image.", "max_tokens": 5}
    r = http.post("/v1/vlm/completions", json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["object"] == "vlm.completion" and answer["id"].startswith("vlm-") and answer["model"] == TINY_VLM_ID
    usage = answer["usage"]
    assert usage["completion_tokens"] == 5 and usage["prompt_tokens"] > 18  # the processor's count, not words + 196
    assert usage["total_tokens"] == usage["prompt_tokens"] + 5 and isinstance(answer["content"], str)
    # Greedy unless asked, as OminiX-API: the same image and prompt, the same answer.
    assert http.post("/v1/vlm/completions", json=body).json()["content"] == answer["content"]


@pytest.mark.parametrize(
    "model, messages, code",
    [
        (
            TINY_VLM_ID,
            [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}],
                }
            ],
            "invalid_image",
        ),
        (LLM, image_message(png()), "image_input_unsupported"),
        (TINY_VLM_ID, image_message(*[png(28, 28)] * 5), "too_many_images"),
        (
            TINY_VLM_ID,
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}],
            "remote_images_disabled",
        ),
    ],
)
def test_bad_images_are_400s_and_the_replica_keeps_serving(client, model, messages, code):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model, messages=messages, max_tokens=2)
    assert info.value.code == code, info.value.message
    assert client.chat.completions.create(model=TINY_VLM_ID, messages=image_message(png()), max_tokens=1).choices


def test_both_new_slots_are_in_models_status_version_and_metrics(client, http):
    cards = {m.id: m for m in client.models.list().data}
    assert cards[TINY_VLM_ID].model_dump()["type"] == "vlm"
    assert cards[MINILM_ID].model_dump()["type"] == "embeddings"
    status = http.get("/v1/models/status").json()
    assert status["models"]["vlm"] == TINY_VLM_ID and status["models"]["embeddings"] == MINILM_ID
    version = http.get("/v1/version").json()
    assert version["capabilities"]["mlx-vlm"]["category"] == "vlm"
    assert version["capabilities"]["mlx-embeddings"]["category"] == "embeddings"
    client.embeddings.create(model=MINILM_ID, input="counted")
    metrics = http.get("/metrics").json()
    assert metrics["embeddings"]["models"][MINILM_ID]["requests"] >= 1
    assert metrics["vlm"]["models"][TINY_VLM_ID]["requests"] >= 1  # the tests above ran first


def test_unload_then_load_the_vlm_default(client, http):
    r = http.post("/v1/models/unload", json={"model_type": "vlm"})
    assert r.status_code == 200, r.text
    assert all(f["freed_bytes"] > 0 for f in r.json()["unloaded"]["vlm"])
    body = {"image": base64.b64encode(png()).decode(), "prompt": "Describe it.", "max_tokens": 1}
    unavailable = http.post("/v1/vlm/completions", json=body)  # no model named: the slot's default
    assert unavailable.status_code == 503 and "/v1/models/load" in unavailable.json()["error"]["message"]
    assert http.post("/v1/models/load", json={"model": TINY_VLM_ID, "model_type": "vlm"}).status_code == 200
    assert client.chat.completions.create(model=TINY_VLM_ID, messages=image_message(png()), max_tokens=1).choices
