"""Vision requests: which slot answers a chat completion, and OminiX-API's /v1/vlm/completions.

A chat completion goes to the VLM slot when its `model` is one the VLM slot serves, and only
then (never by guessing from its content); image parts sent to any other model are a 400. The
images are loaded and checked here (deployments/vlm/images.py: data URLs, remote URLs only
where allowed, decodable, within the limits) before the slot sees the request. Constrained
answers (`response_format`, a forced `tool_choice`) are the LLM slot's alone: the VLM engine
(mlx-vlm's one-request generation) applies no grammar, so a vision model refuses them.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse, StreamingResponse

from deployments.ingress.responses import json_response
from deployments.ingress.serving.generation import ServingChat
from deployments.ingress.state import IngressState
from deployments.protocol.errors import APIError, invalid_request
from deployments.protocol.openai import ChatCompletionRequest, random_id
from deployments.protocol.vision import VLMCompletionRequest, VLMCompletionResponse
from deployments.vlm.images import ImageLimits, load_images


def serves_vision(state: IngressState, model: str | None) -> bool:
    """The VLM slot is on and allows `model` (listed, or a directory under its models_dir)."""
    if not model or "vlm" not in state.catalog.slots:
        return False
    try:
        state.catalog.check_loadable("vlm", model)
    except APIError:
        return False
    return True


def image_limits(state: IngressState) -> ImageLimits:
    return ImageLimits.from_dict(state.catalog.slots["vlm"].options.get("image_limits"))


async def chat_serving(state: IngressState, request: ChatCompletionRequest) -> ServingChat:
    """The serving class that answers this chat request, with its images loaded."""
    if serves_vision(state, request.model):
        refuse_constraints(request)
        return ServingChat(state, "vlm", tuple(await load_images(request.messages, image_limits(state))))
    if request.has_images():
        vision = state.catalog.ids("vlm")
        served = f"the vision models served here: {', '.join(vision)}" if vision else "no vision model is served here"
        raise invalid_request(
            f"messages: image content parts need a vision model; model '{request.model or 'the default LLM'}' "
            f"is text-only ({served})",
            "messages",
            "image_input_unsupported",
        )
    return ServingChat(state)


def refuse_constraints(request: ChatCompletionRequest) -> None:
    """A 400 for what a vision model would otherwise answer unconstrained."""
    fmt = request.response_format
    if fmt is not None and fmt.type != "text":
        field = "response_format"
    elif request.tool_choice not in (None, "none", "auto"):
        field = "tool_choice"
    else:
        return
    raise invalid_request(
        f"{field}: constrained decoding is not available for vision models ('{request.model}'); "
        "use a text model, or leave the field out",
        field,
        "constrained_decoding_unavailable",
    )


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
        served = (stream.first.model if stream.first else None) or model or "unknown"
        return json_response(
            VLMCompletionResponse(id=random_id("vlm"), model=served, content=total.content, usage=total.usage)
        )
