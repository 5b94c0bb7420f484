"""Upload limits of the ASR slot: too many bytes is 413, too long a recording is 400, and a
server file path (OminiX-API's JSON form) must lie inside the configured directory."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from deployments.protocol.errors import APIError, invalid_request


def check_upload_size(nbytes: int, max_mb: float) -> None:
    if nbytes > max_mb * 1024 * 1024:
        raise APIError(
            413,
            f"The audio file is {nbytes / 2**20:.1f} MiB; the limit is {max_mb:g} MiB.",
            "invalid_request_error",
            "file",
            "file_too_large",
        )


def check_duration(seconds: float, max_s: float) -> None:
    if seconds > max_s:
        raise invalid_request(f"The audio is {seconds:.0f} s long; the limit is {max_s:g} s.", "file", "audio_too_long")


def read_server_file(path: str, files_dir: Optional[str], max_mb: float) -> bytes:
    """The bytes of `path`, if it resolves (symlinks included) to a file inside `files_dir`.

    OminiX-API reads any path the client names; here nothing outside the directory is read.
    """
    if not files_dir:
        raise invalid_request(
            "Server file paths are not accepted: send the audio as base64 "
            "(the server has no asr.files_dir configured).",
            "file",
        )
    root = Path(files_dir).expanduser().resolve()
    target = Path(path).expanduser().resolve()
    if not target.is_relative_to(root):
        raise invalid_request(f"'{path}' is outside the directory the server reads audio from.", "file")
    if not target.is_file():
        raise invalid_request(f"'{path}' is not a file on the server.", "file")
    check_upload_size(target.stat().st_size, max_mb)
    return target.read_bytes()
