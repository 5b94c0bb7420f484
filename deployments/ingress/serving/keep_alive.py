"""A request's `keep_alive` (Ollama's field, deployments/protocol/keep_alive.py) handed to the
control plane: Control keeps it for the model, and every replica that holds the model unloads
it after that long idle (deployments/control/idle.py).

It is handed over once the model has answered (the whole answer, or a stream's first chunk,
while the request still holds the model): set before, a keep_alive of 0 could unload the
model on its replica just before the request that carries it arrives there, and the request
would load it again. The answer goes out even when the control plane cannot be reached (a
keep_alive is about memory, the answer is what the client asked for); the ingress's log says
so, and /v1/models/status shows each model's timeout.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Optional

from deployments.ingress.state import IngressState
from deployments.protocol.keep_alive import describe

logger = logging.getLogger("ray.serve")

SET_TIMEOUT_S = 5.0


async def keep_model_alive(state: IngressState, slot: str, model: Optional[str], seconds: Optional[float]) -> None:
    """After `model` (None: the slot's default) answered a request that set `keep_alive`."""
    if seconds is None:
        return
    if state.control is None:
        logger.warning("keep_alive %s for %s not applied: this graph has no control plane", describe(seconds), model)
        return
    try:
        await asyncio.wait_for(state.control.call("set_keep_alive", slot, model, seconds), SET_TIMEOUT_S)
    except Exception as e:
        logger.warning("keep_alive %s for %s on slot %s not applied: %s", describe(seconds), model, slot, e)
