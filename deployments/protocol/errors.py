"""OpenAI-style errors: one exception type and one body shape for every route.

Every failure a client can see is `{"error": {"message", "type", "param", "code"}}` with a
matching HTTP status. Slots raise `APIError` too; it pickles across Ray handles, so the
ingress can answer with the status the slot chose.
"""

from __future__ import annotations

from typing import Any, Optional


def error_body(message: str, type: str, param: Optional[str] = None, code: Optional[str] = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


class APIError(Exception):
    """An error with an HTTP status and an OpenAI error body."""

    def __init__(
        self,
        status_code: int,
        message: str,
        type: str = "invalid_request_error",
        param: Optional[str] = None,
        code: Optional[str] = None,
        headers: Optional[dict[str, str]] = None,
    ):
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}  # e.g. Retry-After on a 429

    def __reduce__(self):  # keep all fields when pickled through Ray
        return (APIError, (self.status_code, self.message, self.type, self.param, self.code, self.headers))

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


def invalid_request(message: str, param: Optional[str] = None, code: Optional[str] = None) -> APIError:
    return APIError(400, message, "invalid_request_error", param, code)


def model_not_found(model: str, available: list[str]) -> APIError:
    listed = ", ".join(available) if available else "none"
    return APIError(
        404,
        f"The model '{model}' does not exist or is not served here. Available models: {listed}.",
        "invalid_request_error",
        "model",
        "model_not_found",
    )


def server_error(message: str) -> APIError:
    return APIError(500, message, "server_error")


def unavailable(message: str) -> APIError:
    return APIError(503, message, "service_unavailable")


def renamed(error: APIError, names: dict[str, str]) -> APIError:
    """A chat-side error with the fields named as the client's protocol names them."""
    param = (error.param or "").split(".")[0]
    if param not in names:
        return error
    message = error.message
    if message.startswith(param):
        message = names[param] + message[len(param) :]
    return APIError(error.status_code, message, error.type, names[param], error.code, error.headers)
