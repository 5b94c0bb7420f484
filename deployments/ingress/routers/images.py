"""The image slot's routes: POST /v1/images/generations (txt2img and img2img, OpenAI's shape)
and POST /v1/models/quantize (OminiX-API's FLUX 8-bit quantization, through mflux).

The request is checked here (size, n, strength, the init image's base64); the slot decodes
the image, generates and encodes. A client that goes away cancels the generation at its next
denoising step.
"""

from __future__ import annotations

import base64
import time
from typing import Optional

from fastapi import APIRouter, Depends

from deployments.ingress.requests import LenientJSONRoute
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.errors import invalid_request
from deployments.protocol.images import (
    GeneratedImages,
    ImageData,
    ImageGenerationRequest,
    ImageParams,
    ImagesResponse,
    QuantizeRequest,
    decode_image_base64,
)

router = APIRouter(tags=["images"], route_class=LenientJSONRoute)


@router.post("/v1/images/generations", response_model=ImagesResponse)
async def create_images(request: ImageGenerationRequest, state: IngressState = Depends(ingress_state)):
    if request.response_format == "url":
        raise invalid_request(
            "response_format 'url' is not supported: this server does not store or serve image files; "
            "use 'b64_json' (the default)",
            "response_format",
            "unsupported_response_format",
        )
    image_slot = state.slot("image")
    model = state.catalog.resolve("image", request.model)
    init_image: Optional[bytes] = None
    if request.image is not None:
        try:
            init_image = decode_image_base64(request.image)
        except ValueError as e:
            raise invalid_request(str(e), "image", "invalid_image") from None
    params = ImageParams.from_request(request, init_image)
    result: GeneratedImages = await image_slot.call("generate", params, model=model)
    return ImagesResponse(
        created=int(time.time()),
        data=[
            ImageData(b64_json=base64.b64encode(image).decode(), revised_prompt=request.prompt, seed=seed)
            for image, seed in zip(result.images, result.seeds)
        ],
        model=result.model,
        output_format=result.output_format,
        size=request.size,
    )


@router.post("/v1/models/quantize")
async def quantize_model(request: QuantizeRequest, state: IngressState = Depends(ingress_state)) -> dict:
    """mflux quantization of an image model this graph serves (FLUX.2-klein, Z-Image-Turbo)."""
    image_slot = state.slot("image")
    image_models = state.catalog.slots.get("image")
    model = state.catalog.canonical("image", request.model_id) if image_models else request.model_id
    if image_models is None or model not in state.catalog.ids("image"):
        served = ", ".join(image_models.models) if image_models else "none (the image slot is off)"
        raise invalid_request(
            f"Quantization is supported for the image slot's models (FLUX.2-klein, Z-Image-Turbo, through "
            f"mflux); '{request.model_id}' is not one. Image models served here: {served}. LLMs come "
            "quantized from mlx-lm (e.g. mlx-community/*-4bit).",
            "model_id",
            "model_not_quantizable",
        )
    result = await image_slot.call("quantize", model, request.bits)
    verb = "Reused existing" if result["reused"] else "Saved"
    return {
        "status": "success",
        "message": f'{verb} {result["bits"]}-bit quantized weights at "{result["path"]}"',
        **result,
    }
