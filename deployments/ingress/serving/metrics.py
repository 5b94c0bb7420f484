"""The /metrics summary: the ingress's own counters and each slot's `metrics_summary()`
(every slot answers it: deployments/slot_replica.py), from the one replica of that slot that
answers the call, which names itself (`replica`); as JSON, or written for Prometheus
(deployments/ingress/prometheus.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

from deployments.ingress.prometheus import CONTENT_TYPES, exposition
from deployments.ingress.state import IngressState

SUMMARY_TIMEOUT_S = 5


class ServingMetrics:
    def __init__(self, state: IngressState):
        self.state = state

    async def summary(self) -> dict:
        names = list(self.state.slots)
        answers = await asyncio.gather(*[_summary(self.state.slots[name]) for name in names])
        return {"ingress": self.state.metrics.summary(), **dict(zip(names, answers))}

    async def exposition(self, format: str) -> tuple[bytes, str]:
        """The summary in `format` (prometheus or openmetrics), with its content type."""
        return exposition(await self.summary(), format), CONTENT_TYPES[format]


async def _summary(client: Any) -> dict:
    try:
        return await asyncio.wait_for(client.call("metrics_summary"), timeout=SUMMARY_TIMEOUT_S)
    except Exception as e:  # a slot that cannot answer must not break the summary
        return {"error": f"{type(e).__name__}: {e}"}
