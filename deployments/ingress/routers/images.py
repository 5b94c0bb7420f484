"""The image slot's routes: POST /v1/images/generations (txt2img and img2img, OpenAI's shape)
and POST /v1/models/quantize (OminiX-API's FLUX 8-bit quantization, through mflux).

The request is checked here (size, n, strength through its model; `response_format`);
`ServingImages` (ingress/serving/images.py) decodes the init image's base64 and calls the slot.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends

from deployments.ingress.requests import LenientJSONRoute
from deployments.ingress.serving.images import ServingImages
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.errors import invalid_request
from deployments.protocol.images import ImageGenerationRequest, ImagesResponse, QuantizeRequest

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
    return await ServingImages(state).generate(request)


@router.post("/v1/models/quantize")
async def quantize_model(request: QuantizeRequest, state: IngressState = Depends(ingress_state)) -> dict:
    """mflux quantization of an image model this graph serves (FLUX.2-klein, Z-Image-Turbo)."""
    return await ServingImages(state).quantize(request)
