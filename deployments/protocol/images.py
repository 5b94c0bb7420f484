"""Image generation request models: POST /v1/images/generations and what the ingress sends
the image slot.

OpenAI's request (prompt, model, n, size, response_format, output_format, output_compression)
plus OminiX-API's img2img fields (image, strength) and the diffusion knobs every image server
offers (seed, steps, guidance, negative_prompt). No Ray, no MLX, no image library.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from deployments.protocol.b64 import decode_base64_field
from deployments.protocol.keep_alive import KEEP_ALIVE_FIELD, KeepAlive

# FLUX.2 and Z-Image latents are 1/8 of the image, packed 2x2: sides must be multiples of 16.
SIZE_MULTIPLE = 16
MIN_SIDE = 16
MAX_SIDE = 2048  # OminiX-API's upper bound
MAX_IMAGES = 10  # OpenAI's bound on n
MAX_STEPS = 100
MAX_SEED = 2**32 - 1
DEFAULT_SIZE = "512x512"  # OminiX-API's default

OutputFormat = Literal["png", "jpeg", "webp"]


def parse_size(size: str) -> tuple[int, int]:
    """'WxH' -> (width, height); ValueError with the reason when it is not a size we can make."""
    parts = size.strip().lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ValueError(f"size must be 'WIDTHxHEIGHT' (e.g. '512x512'), got {size!r}")
    width, height = int(parts[0]), int(parts[1])
    for side in (width, height):
        if not MIN_SIDE <= side <= MAX_SIDE:
            raise ValueError(f"size {size!r}: each side must be between {MIN_SIDE} and {MAX_SIDE} pixels")
        if side % SIZE_MULTIPLE:
            raise ValueError(f"size {size!r}: each side must be a multiple of {SIZE_MULTIPLE}")
    return width, height


def decode_image_base64(data: str) -> bytes:
    """Base64 (optionally a `data:image/...;base64,` URL) -> bytes; ValueError if it is not."""
    try:
        raw = decode_base64_field(data)
    except ValueError:
        raise ValueError("image is not valid base64") from None
    if not raw:
        raise ValueError("image is empty")
    return raw


class ImageGenerationRequest(BaseModel):
    # Unknown OpenAI fields (quality, style, background, moderation, user) are accepted and
    # ignored, as OminiX-API does with quality.
    # strict: the JSON types /openapi.json publishes, as RequestModel (deployments/protocol/openai.py)
    model_config = ConfigDict(extra="ignore", populate_by_name=True, strict=True)

    prompt: str
    model: Optional[str] = None
    keep_alive: Optional[KeepAlive] = KEEP_ALIVE_FIELD
    n: int = Field(1, ge=1, le=MAX_IMAGES)
    size: str = DEFAULT_SIZE
    response_format: Literal["b64_json", "url"] = "b64_json"
    output_format: OutputFormat = "png"
    output_compression: Optional[int] = Field(None, ge=0, le=100, description="jpeg/webp quality")
    seed: Optional[int] = Field(None, ge=0, le=MAX_SEED)
    steps: Optional[int] = Field(
        None, ge=1, le=MAX_STEPS, validation_alias=AliasChoices("steps", "num_inference_steps")
    )
    guidance: Optional[float] = Field(None, ge=0, le=30, validation_alias=AliasChoices("guidance", "guidance_scale"))
    negative_prompt: Optional[str] = None
    image: Optional[str] = Field(None, description="img2img: base64 PNG/JPEG/WebP (a data URL is fine)")
    strength: float = Field(0.75, ge=0, le=1, description="img2img: 1 repaints everything, 0 keeps the image")

    @field_validator("prompt")
    @classmethod
    def _prompt_not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("prompt must not be empty")
        return v

    @field_validator("size", mode="before")
    @classmethod
    def _size(cls, v):
        if v is None or v == "auto":  # OpenAI's "auto": our default
            return DEFAULT_SIZE
        if not isinstance(v, str):
            raise ValueError("size must be a string 'WIDTHxHEIGHT'")
        parse_size(v)
        return v.strip().lower()

    @field_validator("negative_prompt", "model", "image")
    @classmethod
    def _blank_is_none(cls, v: Optional[str]) -> Optional[str]:
        return v if v is None or v.strip() else None

    @field_validator("output_format", mode="before")
    @classmethod
    def _jpg(cls, v):
        return "jpeg" if isinstance(v, str) and v.lower() == "jpg" else v

    @property
    def dimensions(self) -> tuple[int, int]:
        return parse_size(self.size)


class ImageParams(BaseModel):
    """One generation as the image slot receives it: checked, the init image decoded to bytes."""

    prompt: str
    width: int
    height: int
    n: int = 1
    seed: Optional[int] = None
    steps: Optional[int] = None
    guidance: Optional[float] = None
    negative_prompt: Optional[str] = None
    init_image: Optional[bytes] = None  # img2img: the encoded image
    strength: float = 0.75
    output_format: OutputFormat = "png"
    output_compression: Optional[int] = None

    @classmethod
    def from_request(cls, request: ImageGenerationRequest, init_image: Optional[bytes]) -> ImageParams:
        width, height = request.dimensions
        return cls(
            prompt=request.prompt,
            width=width,
            height=height,
            n=request.n,
            seed=request.seed,
            steps=request.steps,
            guidance=request.guidance,
            negative_prompt=request.negative_prompt,
            init_image=init_image,
            strength=request.strength,
            output_format=request.output_format,
            output_compression=request.output_compression,
        )


class GeneratedImages(BaseModel):
    """What the image slot returns: encoded images, in order, and the seed of each."""

    model: str
    images: list[bytes]
    seeds: list[int]
    output_format: OutputFormat = "png"


class ImageData(BaseModel):
    b64_json: str
    revised_prompt: str
    seed: int  # the seed of this image: the same request with it gives the same image


class ImagesResponse(BaseModel):
    """POST /v1/images/generations: OpenAI's shape plus the model, format, size and seeds."""

    created: int
    data: list[ImageData]
    model: str
    output_format: OutputFormat
    size: str


class ImageEditForm(ImageGenerationRequest):
    """POST /v1/images/edits' form fields other than the files: the img2img request they make
    (form values are strings, so they are coerced, not strict)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, strict=False)


EDIT_FIELDS = (
    "prompt",
    "model",
    "keep_alive",
    "n",
    "size",
    "response_format",
    "output_format",
    "output_compression",
    "seed",
    "steps",
    "guidance",
    "negative_prompt",
    "strength",
)
# What OpenAI's edit takes that img2img cannot do: a 400 naming the field, never ignored.
EDIT_REFUSED = {
    "mask": "masks (inpainting) are not served: an edit repaints the whole image, `strength` says how much",
    "stream": "partial images are not streamed: the edit is answered whole",
}


class QuantizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, strict=True)

    model_id: str = Field(..., min_length=1, validation_alias=AliasChoices("model_id", "model"))
    bits: Literal[3, 4, 5, 6, 8] = 8  # OminiX-API quantizes FLUX to 8 bit
