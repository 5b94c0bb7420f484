"""Image bytes in and out of the slot: decode an uploaded init image, encode PNG/JPEG/WebP.

Pillow only (mflux depends on it). No Ray, no MLX.
"""

from __future__ import annotations

import io
from typing import Optional

MAX_INIT_PIXELS = 4096 * 4096  # a decompression bomb is a 400, not an out-of-memory replica


class BadImage(ValueError):
    """The uploaded image cannot be used; the message says why."""


def open_image(data: bytes):
    """Encoded image bytes -> an RGB PIL image."""
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
        if image.width * image.height > MAX_INIT_PIXELS:
            raise BadImage(f"image is {image.width}x{image.height}; at most {MAX_INIT_PIXELS} pixels")
        image.load()
    except BadImage:
        raise
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as e:
        raise BadImage(f"image could not be decoded as PNG, JPEG or WebP ({type(e).__name__})") from None
    return image.convert("RGB")


def encode_image(image, fmt: str = "png", quality: Optional[int] = None) -> bytes:
    """A PIL image -> PNG, JPEG or WebP bytes (quality 0-100 for the lossy ones)."""
    out = io.BytesIO()
    if fmt == "png":
        image.save(out, format="PNG")
    elif fmt in ("jpeg", "webp"):
        image.convert("RGB").save(out, format=fmt.upper(), quality=95 if quality is None else quality)
    else:
        raise ValueError(f"unsupported output format {fmt!r}")
    return out.getvalue()
