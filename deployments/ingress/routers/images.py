"""The image slot's routes: POST /v1/images/generations (txt2img and img2img, OpenAI's shape),
POST /v1/images/edits (OpenAI's multipart edit: img2img of the uploaded image) and POST
/v1/models/quantize (OminiX-API's FLUX 8-bit quantization, through mflux).

The request is checked here (size, n, strength through its model; `response_format`; what an
edit asks that img2img cannot do); `ServingImages` (ingress/serving/images.py) decodes the init
image's base64 and calls the slot.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.datastructures import UploadFile

from deployments.ingress.audio_params import validated
from deployments.ingress.requests import LenientJSONRoute
from deployments.ingress.serving.images import ServingImages
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.errors import invalid_request
from deployments.protocol.images import (
    EDIT_FIELDS,
    EDIT_REFUSED,
    ImageEditForm,
    ImageGenerationRequest,
    ImagesResponse,
    QuantizeRequest,
)

router = APIRouter(tags=["images"], route_class=LenientJSONRoute)


@router.post("/v1/images/generations", response_model=ImagesResponse)
async def create_images(request: ImageGenerationRequest, state: IngressState = Depends(ingress_state)):
    _no_urls(request)
    return await ServingImages(state).generate(request)


@router.post("/v1/images/edits", response_model=ImagesResponse)
async def edit_images(request: Request, state: IngressState = Depends(ingress_state)):
    """OpenAI's image edit as img2img: one uploaded image repainted toward the prompt (the form's
    `strength`, 0.75 unless sent, says how much). A mask, several images or a stream are 400s."""
    form = await request.form()
    for name, why in EDIT_REFUSED.items():
        if form.get(name) not in (None, "", "false"):
            raise invalid_request(f"{name}: {why}", name, "unsupported_parameter")
    images = [f for key in ("image", "image[]") for f in form.getlist(key)]
    if len(images) != 1 or not isinstance(images[0], UploadFile):
        raise invalid_request("image: send one image file to edit (a multipart file)", "image")
    edit = validated(ImageEditForm, {name: form.get(name) for name in EDIT_FIELDS})
    _no_urls(edit)
    return await ServingImages(state).generate(edit, await images[0].read())


def _no_urls(request: ImageGenerationRequest) -> None:
    if request.response_format == "url":
        raise invalid_request(
            "response_format 'url' is not supported: this server does not store or serve image files; "
            "use 'b64_json' (the default)",
            "response_format",
            "unsupported_response_format",
        )


@router.post("/v1/models/quantize")
async def quantize_model(request: QuantizeRequest, state: IngressState = Depends(ingress_state)) -> dict:
    """mflux quantization of an image model this graph serves (FLUX.2-klein, Z-Image-Turbo)."""
    return await ServingImages(state).quantize(request)
