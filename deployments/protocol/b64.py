"""Base64 fields of JSON requests (audio, images): one decoder for every route.

Accepted: standard base64, optionally as a `data:<type>;base64,` URL, and wrapped in lines
(GNU coreutils' `base64 file` wraps at 76 columns: OminiX-API's README's `$(base64 -i audio.wav)`
on Linux). Anything else is a ValueError the route turns into its 400.
"""

from __future__ import annotations

import base64
import binascii


def decode_base64_field(text: str) -> bytes:
    if text.startswith("data:") and "," in text:
        text = text.split(",", 1)[1]
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not valid base64") from None
