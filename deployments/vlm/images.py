"""The images of a vision chat request: found in its content parts, loaded and checked before
any model work. No Ray, no MLX (Pillow and httpx).

An image part is OpenAI's `{"type": "image_url", "image_url": {"url": ...}}` (the URL may also
be given as a plain string). Data URLs (`data:image/png;base64,...`) are always accepted. Remote
`http(s)://` URLs are fetched only when the slot's config allows it (`allow_remote_images`, off
by default: a server-side fetch lets a client make the server call any address it can reach,
an SSRF risk), with a byte cap and a timeout. Every image must decode (Pillow) and stay within
the pixel and byte limits; each failure is a 400 naming the part and the problem.
"""

from __future__ import annotations

import asyncio
import io
from dataclasses import dataclass
from typing import Any, Optional

from deployments.protocol.errors import APIError, invalid_request
from deployments.protocol.images import decode_image_base64
from deployments.protocol.openai import ChatMessage, ImagePart

MiB = 1024 * 1024


@dataclass(frozen=True)
class ImageLimits:
    max_images: int = 4  # per request
    max_image_bytes: int = 10 * MiB  # encoded, per image
    max_pixels: int = 4096 * 4096  # decoded, per image (also Pillow's decompression-bomb guard)
    allow_remote: bool = False
    remote_timeout_s: float = 10.0

    @classmethod
    def from_dict(cls, raw: Optional[dict]) -> ImageLimits:
        return cls(**(raw or {}))


def image_error(message: str, param: str, code: str = "invalid_image") -> APIError:
    return invalid_request(message, param, code)


def image_parts(messages: list[ChatMessage]) -> list[tuple[str, ImagePart]]:
    """(param path, part) for every image part, in order."""
    return [
        (f"messages[{i}].content[{j}]", part)
        for i, message in enumerate(messages)
        if isinstance(message.content, list)
        for j, part in enumerate(message.content)
        if isinstance(part, ImagePart)
    ]


def part_url(part: ImagePart, param: str) -> str:
    """The URL of an image part: `image_url.url`, `image_url` as a string, or `image`."""
    value: Any = getattr(part, "image_url", None) or getattr(part, "image", None)
    if isinstance(value, dict):
        value = value.get("url")
    if not isinstance(value, str) or not value.strip():
        raise image_error(f"{param}: an image part needs image_url.url (a data:image/...;base64 URL)", param)
    return value.strip()


def check_image(raw: bytes, param: str, limits: ImageLimits) -> bytes:
    """The bytes, once Pillow has decoded them within the limits; a 400 otherwise."""
    from PIL import Image

    if len(raw) > limits.max_image_bytes:
        raise image_error(
            f"{param}: the image is {len(raw)} bytes; at most {limits.max_image_bytes} are allowed",
            param,
            "image_too_large",
        )
    try:
        with Image.open(io.BytesIO(raw)) as image:
            width, height = image.size
            if width * height > limits.max_pixels:
                raise image_error(
                    f"{param}: the image is {width}x{height} pixels; at most {limits.max_pixels} pixels are allowed",
                    param,
                    "image_too_large",
                )
            image.load()  # decodes every pixel: a truncated or corrupt file fails here
    except APIError:
        raise
    except Exception as e:
        raise image_error(f"{param}: the image could not be decoded ({type(e).__name__})", param) from None
    return raw


async def load_image(url: str, param: str, limits: ImageLimits) -> bytes:
    if url.startswith("data:"):
        header = url.split(",", 1)[0]
        if not header.startswith("data:image/") or not header.endswith(";base64"):
            raise image_error(f"{param}: a data URL must be data:image/<type>;base64,...", param)
        try:
            raw = decode_image_base64(url)
        except ValueError as e:
            raise image_error(f"{param}: {e}", param) from None
        return await asyncio.to_thread(check_image, raw, param, limits)  # decoding is CPU work: off the loop
    if url.startswith(("http://", "https://")):
        if not limits.allow_remote:
            raise image_error(
                f"{param}: data URLs are required (data:image/png;base64,...); this server does not fetch "
                "remote image URLs (vlm.allow_remote_images is off)",
                param,
                "remote_images_disabled",
            )
        return await asyncio.to_thread(check_image, await fetch_image(url, param, limits), param, limits)
    raise image_error(f"{param}: unsupported image URL; send a data:image/...;base64 URL", param)


async def fetch_image(url: str, param: str, limits: ImageLimits) -> bytes:
    """GET `url`, reading at most max_image_bytes + 1 bytes within the timeout."""
    import httpx

    try:
        async with httpx.AsyncClient(timeout=limits.remote_timeout_s, follow_redirects=False) as client:
            async with client.stream("GET", url) as response:
                if response.status_code != 200:
                    raise image_error(f"{param}: fetching the image gave HTTP {response.status_code}", param)
                data = bytearray()
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) > limits.max_image_bytes:
                        raise image_error(
                            f"{param}: the remote image is over {limits.max_image_bytes} bytes",
                            param,
                            "image_too_large",
                        )
                return bytes(data)
    except httpx.HTTPError as e:
        raise image_error(f"{param}: the image could not be fetched ({type(e).__name__})", param) from None


async def load_images(messages: list[ChatMessage], limits: ImageLimits) -> list[bytes]:
    """Every image of the request, in order, checked; a 400 naming the first problem."""
    parts = image_parts(messages)
    if len(parts) > limits.max_images:
        raise image_error(
            f"messages: {len(parts)} images; this server accepts at most {limits.max_images} per request",
            "messages",
            "too_many_images",
        )
    return [await load_image(part_url(part, param), param, limits) for param, part in parts]
