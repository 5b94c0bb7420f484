"""The image slot's work for the ingress: txt2img and img2img (POST /v1/images/generations,
OpenAI's shape; POST /v1/images/edits, the same img2img from an uploaded image) and mflux
quantization of an image model (POST /v1/models/quantize).

The slot decodes the init image, generates and encodes; a client that goes away cancels the
generation at its next denoising step.
"""

from __future__ import annotations

import base64
import time
from typing import Optional

from deployments.ingress.serving.keep_alive import keep_model_alive
from deployments.ingress.state import IngressState
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


class ServingImages:
    """The image slot is looked up first: a graph without it answers `slot_disabled`."""

    def __init__(self, state: IngressState):
        self.state = state
        self.image = state.slot("image")

    async def generate(self, request: ImageGenerationRequest, image: Optional[bytes] = None) -> ImagesResponse:
        """Images for `request`; img2img from `image` (an upload) or the request's base64 `image`."""
        model = self.state.catalog.resolve("image", request.model)
        params = ImageParams.from_request(request, image or _init_image(request.image))
        result: GeneratedImages = await self.image.call("generate", params, model=model)
        await keep_model_alive(self.state, "image", result.model, request.keep_alive)
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

    async def quantize(self, request: QuantizeRequest) -> dict:
        """mflux quantization of an image model this graph serves (FLUX.2-klein, Z-Image-Turbo)."""
        model = self._quantizable(request.model_id)
        result = await self.image.call("quantize", model, request.bits)
        verb = "Reused existing" if result["reused"] else "Saved"
        return {
            "status": "success",
            "message": f'{verb} {result["bits"]}-bit quantized weights at "{result["path"]}"',
            **result,
        }

    def _quantizable(self, model_id: str) -> str:
        """The canonical id of an image model this graph serves; a 400 for any other."""
        catalog = self.state.catalog
        image_models = catalog.slots.get("image")
        model = catalog.canonical("image", model_id) if image_models else model_id
        if image_models is None or model not in catalog.ids("image"):
            served = ", ".join(image_models.models) if image_models else "none (the image slot is off)"
            raise invalid_request(
                f"Quantization is supported for the image slot's models (FLUX.2-klein, Z-Image-Turbo, through "
                f"mflux); '{model_id}' is not one. Image models served here: {served}. LLMs come "
                "quantized from mlx-lm (e.g. mlx-community/*-4bit).",
                "model_id",
                "model_not_quantizable",
            )
        return model


def _init_image(encoded: Optional[str]) -> Optional[bytes]:
    """img2img's base64 init image, decoded (a bad one is a 400)."""
    if encoded is None:
        return None
    try:
        return decode_image_base64(encoded)
    except ValueError as e:
        raise invalid_request(str(e), "image", "invalid_image") from None
