"""A real HTTP server on a loopback socket, in a background thread of the test process: the
base of the fakes of systems outside the project (the CUDA worker shim, the Hugging Face hub).
A subclass gives its Starlette app (`_app()`) and calls `reset()` for its own state."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Optional

import uvicorn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoopbackServer:
    name = "fake"

    def __init__(self):
        self.port = free_port()
        self.reset()
        self._server: Optional[uvicorn.Server] = None
        self._thread: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self) -> None:
        pass

    def _app(self) -> Any:
        raise NotImplementedError

    def start(self):
        config = uvicorn.Config(self._app(), host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=self.name, daemon=True)
        self._thread.start()
        deadline = time.time() + 10
        while not self._server.started:
            if time.time() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"{self.name} did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
            self._server = None
