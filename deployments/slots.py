"""The slot registry: the one list of the graph's model slots.

Each slot package declares its own entry (`deployments/<slot>/slot.py`: a `Slot` of
deployments/slot_types.py); this module only assembles them, in the order the graph args, the
catalog and /metrics list them. The graph builder binds from it, the ingress gets one handle per
entry, and the catalog, /v1/version, /metrics, the disk report and the route policies derive
from it. Adding a slot is one package with its `slot.py`, one line here and its routers
(docs/architecture.md, "Adding a slot").

Only the layers above the slots import this module (the ingress, the graph builder, bench):
a slot replica is given its own entry, and Control is given what it needs when the graph is
bound. It stays free of Ray and MLX.
"""

from __future__ import annotations

from deployments.asr.slot import SLOT as ASR
from deployments.embeddings.slot import SLOT as EMBEDDINGS
from deployments.image.slot import SLOT as IMAGE
from deployments.llm.slot import SLOT as LLM
from deployments.resources import MiB
from deployments.slot_types import Route, Slot
from deployments.tts.slot import SLOT as TTS
from deployments.vlm.slot import SLOT as VLM

SLOTS: dict[str, Slot] = {
    slot.name: slot
    for slot in (
        LLM,
        ASR,
        TTS,
        IMAGE,
        EMBEDDINGS,
        VLM,
    )
}

# Routes that belong to no slot: model management, other WebSockets, everything else.
GENERAL_ROUTES = (
    Route("/v1/models/load", 64 * 1024, 300.0),
    Route("/v1/models/unload", 64 * 1024, 30.0),
    # The voice agent (LLM -> TTS): a whole answer spoken, as long as the slower of the two.
    Route("/v1/agent/stream", 1 * MiB, 600.0),
    Route("/v1/models/download/progress", 64 * 1024, None),  # an SSE stream as long as the download
    Route("/ws/", 1 * MiB, None),
    Route("", 1 * MiB, 60.0),
)


def all_routes() -> list[Route]:
    """Every route policy, longest prefix first (the first match is the most specific one).
    Disabled slots keep theirs, so their routes answer "slot disabled", not a size error."""
    routes = [route for slot in SLOTS.values() for route in slot.routes] + list(GENERAL_ROUTES)
    return sorted(routes, key=lambda route: len(route.prefix), reverse=True)
