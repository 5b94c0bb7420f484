"""A fake Hugging Face hub: the HTTP protocol huggingface_hub speaks to download a repo, on a
real loopback socket (point HF_ENDPOINT at `hub.url`). The hub is a system outside the project.

Served: `GET /api/models/{repo}[/revision/{rev}]` (model info with the files and their sizes)
and `HEAD`/`GET /{repo}/resolve/{rev}/{file}` (the file, its commit, ETag and size; ranges for
resumed downloads). `bytes_per_s` slows every file body down, so a test can watch progress and
cancel mid-file; `requests` records what was asked.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.loopback import LoopbackServer

CHUNK = 16 * 1024
# The repo the download tests fetch: a config and 6 MB of weights (24 reads of 256 KiB).
TINY_REPO = "acme/tiny-model"
TINY_FILES = {"config.json": b'{"model_type": "qwen3"}', "model.safetensors": os.urandom(6_000_000)}


class FakeHub(LoopbackServer):
    name = "fake-hub"

    def __init__(self, repos: dict[str, dict[str, bytes]]):
        self.repos = repos  # repo id -> {path in the repo: content}
        super().__init__()

    def reset(self) -> None:
        self.bytes_per_s: float | None = None
        self.requests: list[tuple[str, str]] = []

    @staticmethod
    def sha(repo: str) -> str:
        return hashlib.sha1(repo.encode()).hexdigest()

    def _app(self):
        from starlette.applications import Starlette

        return Starlette(
            routes=[
                Route("/api/models/{owner}/{name}", self._info),
                Route("/api/models/{owner}/{name}/revision/{rev:path}", self._info),
                Route("/{owner}/{name}/resolve/{rev}/{path:path}", self._file, methods=["GET", "HEAD"]),
            ]
        )

    def _repo(self, request: Request) -> tuple[str, dict[str, bytes] | None]:
        repo = f"{request.path_params['owner']}/{request.path_params['name']}"
        self.requests.append((request.method, request.url.path))
        return repo, self.repos.get(repo)

    async def _info(self, request: Request):
        repo, files = self._repo(request)
        if files is None:
            return JSONResponse({"error": "Repository not found"}, 404, headers={"X-Error-Code": "RepoNotFound"})
        siblings = [{"rfilename": path, "size": len(data)} for path, data in files.items()]
        return JSONResponse(
            {"id": repo, "modelId": repo, "sha": self.sha(repo), "siblings": siblings, "private": False}
        )

    async def _file(self, request: Request):
        repo, files = self._repo(request)
        path = request.path_params["path"]
        if files is None or path not in files:
            return JSONResponse({"error": "Entry not found"}, 404, headers={"X-Error-Code": "EntryNotFound"})
        data = files[path]
        headers = {"X-Repo-Commit": self.sha(repo), "ETag": f'"{hashlib.sha256(data).hexdigest()}"'}
        start = 0
        if request.headers.get("range", "").startswith("bytes="):
            start = int(request.headers["range"].removeprefix("bytes=").split("-")[0] or 0)
        if request.method == "HEAD":
            return Response(headers={**headers, "Content-Length": str(len(data))})
        body = data[start:]
        headers["Content-Length"] = str(len(body))
        status = 206 if start else 200
        if start:
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        return StreamingResponse(self._chunks(body), status_code=status, headers=headers)

    async def _chunks(self, body: bytes):
        for i in range(0, len(body), CHUNK):
            if self.bytes_per_s:
                await asyncio.sleep(CHUNK / self.bytes_per_s)
            yield body[i : i + CHUNK]


@contextmanager
def running_hub(repos: dict[str, dict[str, bytes]]) -> Iterator[FakeHub]:
    hub = FakeHub(repos).start()
    try:
        yield hub
    finally:
        hub.stop()


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    """A hub serving TINY_REPO (import the fixture into a test module)."""
    with running_hub({TINY_REPO: TINY_FILES}) as hub:
        yield hub
