"""Every error the ingress answers is OpenAI-shaped (Anthropic-shaped on Anthropic's routes,
/v1/messages*): this module maps FastAPI's and Ray's exceptions onto `APIError`, so no route ever
returns FastAPI's 422 `detail` list or an HTML page.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from deployments.protocol.anthropic import anthropic_error_body
from deployments.protocol.errors import APIError, server_error, unavailable

logger = logging.getLogger("ray.serve")


ANTHROPIC_ROUTES = "/v1/messages"


def speaks_anthropic(path: str) -> bool:
    """Anthropic's routes answer errors in Anthropic's shape, every other route in OpenAI's."""
    return path == ANTHROPIC_ROUTES or path.startswith(ANTHROPIC_ROUTES + "/")


def error_body_for(path: str, error: APIError) -> dict[str, Any]:
    return anthropic_error_body(error) if speaks_anthropic(path) else error.body()


def error_response(error: APIError, path: str = "") -> JSONResponse:
    return JSONResponse(error_body_for(path, error), status_code=error.status_code, headers=error.headers or None)


def _path(request: Request) -> str:
    path, root = request.url.path, request.scope.get("root_path", "")
    return path[len(root) :] or "/" if root and path.startswith(root) else path


def from_exception(exc: BaseException) -> APIError:
    """The APIError behind an exception that may have crossed a Ray handle."""
    from ray import exceptions as ray_exceptions
    from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError

    if isinstance(exc, ray_exceptions.RayTaskError) and exc.cause is not None:
        exc = exc.cause
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, (BackPressureError, DeploymentUnavailableError)):
        return unavailable(f"The model slot is overloaded or unavailable: {exc}")
    if isinstance(exc, (ray_exceptions.RayActorError, ray_exceptions.NodeDiedError)):
        # ActorDiedError, ActorUnavailableError: the replica's process or its whole node is gone.
        # The code tells stateful callers (streaming sessions) that the replica's state is gone.
        return APIError(
            503,
            "A model replica died or its node was lost while serving the request; retry it",
            "service_unavailable",
            code="replica_died",
        )
    logger.exception("Unexpected error", exc_info=exc)
    return server_error(f"Internal error: {type(exc).__name__}: {exc}")


def failure_line(method: str, path: str, error: APIError) -> str | None:
    """The one line a failed request leaves in the log: only a server-side failure (5xx), since
    a client's mistake is the client's to see (its 4xx body says it). The route names the slot."""
    if error.status_code < 500:
        return None
    return f"{method} {path} failed: {error.status_code} {error.message}"


def _failed(request: Request, error: APIError) -> JSONResponse:
    path = _path(request)
    line = failure_line(request.method, path, error)
    if line:
        logger.warning(line)
    return error_response(error, path)


def validate_body(model: type[BaseModel], body: Any) -> Any:
    """Parse a JSON body that a route had to look at first; failures are the usual 400."""
    try:
        return model.model_validate(body)
    except ValidationError as e:
        raise RequestValidationError(e.errors(include_url=False)) from None


# A model-level check's message starts with the field it is about: "top_logprobs: needs logprobs: true".
_NAMED_FIELD = re.compile(r"([a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)*): ")


def validation_error(exc: RequestValidationError) -> APIError:
    """The 400 a validation failure answers."""
    message, param = _validation_message(exc)
    return APIError(400, message, "invalid_request_error", param)


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "Invalid request", None
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    if first.get("type") == "json_invalid":
        return f"Invalid JSON body: {first.get('ctx', {}).get('error', first.get('msg'))}", None
    msg = first.get("msg", "invalid value").removeprefix("Value error, ")
    param = ".".join(loc) or None
    if param and not msg.startswith(loc[0] + ":"):
        msg = f"{param}: {msg}"
    if param is None and (named := _NAMED_FIELD.match(msg)):  # a check across fields names its field
        param = named.group(1)
    if len(errors) > 1:
        msg += f" (and {len(errors) - 1} more problems)"
    return msg, param


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        return _failed(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        return error_response(validation_error(exc), _path(request))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 404:
            message = f"Invalid URL ({request.method} {request.url.path})"
        elif exc.status_code == 405:
            message = f"Method {request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        error = APIError(exc.status_code, message, kind)
        line = failure_line(request.method, _path(request), error)
        if line:
            logger.warning(line)
        return JSONResponse(error_body_for(_path(request), error), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        return _failed(request, from_exception(exc))
