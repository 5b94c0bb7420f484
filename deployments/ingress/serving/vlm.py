"""OminiX-API's /v1/vlm/completions on the VLM slot: one base64 image and a prompt, answered
whole. The image is loaded and checked as a chat completion's (serving/generation.py)."""

from __future__ import annotations

from fastapi.responses import JSONResponse, StreamingResponse

from deployments.ingress.responses import json_response
from deployments.ingress.serving.generation import image_limits
from deployments.ingress.serving.keep_alive import keep_model_alive
from deployments.ingress.state import IngressState
from deployments.protocol.errors import APIError, invalid_request
from deployments.protocol.openai import random_id
from deployments.protocol.vision import VLMCompletionRequest, VLMCompletionResponse
from deployments.vlm.images import load_images


class ServingVLMCompletion:
    """POST /v1/vlm/completions: one image and a prompt, answered whole."""

    def __init__(self, state: IngressState):
        self.state = state

    async def create(self, request: VLMCompletionRequest) -> JSONResponse | StreamingResponse:
        vlm = self.state.slot("vlm")
        model = self.state.catalog.resolve("vlm", request.model)
        chat = request.as_chat()
        try:
            images = await load_images(chat.messages, image_limits(self.state))
        except APIError as e:  # the client sent `image`, not a message: name that field
            raise invalid_request(e.message.replace("messages[0].content[0]", "image"), "image", e.code) from None
        stream = await vlm.stream("chat", chat, images, model=model)
        total = await stream.collect()
        served = (stream.first.model if stream.first else None) or model
        await keep_model_alive(self.state, "vlm", served, request.keep_alive)
        served = served or "unknown"
        return json_response(
            VLMCompletionResponse(id=random_id("vlm"), model=served, content=total.content, usage=total.usage)
        )
