"""Upload limits of the ASR slot: too many bytes is 413, too long a recording is 400."""

from __future__ import annotations

from deployments.protocol.errors import APIError, invalid_request


def check_upload_size(nbytes: int, max_mb: float) -> None:
    if nbytes > max_mb * 1024 * 1024:
        raise APIError(413, f"The audio file is {nbytes / 2**20:.1f} MiB; the limit is {max_mb:g} MiB.",
                       "invalid_request_error", "file", "file_too_large")


def check_duration(seconds: float, max_s: float) -> None:
    if seconds > max_s:
        raise invalid_request(f"The audio is {seconds:.0f} s long; the limit is {max_s:g} s.",
                              "file", "audio_too_long")
