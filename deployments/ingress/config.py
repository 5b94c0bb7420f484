"""The ingress's own settings: API keys, CORS, the connection cap, body caps and timeouts.

API keys never travel in clear beyond this module: the graph builder turns them into SHA-256
digests before binding the ingress, so keys do not end up in Ray's deployment state, logs or
dashboard. A request's key is hashed and compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

MiB = 1024 * 1024

# (path prefix, max body bytes, timeout seconds or None). First match wins; values follow
# OminiX-API (section 1.4/1.5 of the behaviour spec) where it has them.
DEFAULT_ROUTE_POLICIES: list[tuple[str, int, Optional[float]]] = [
    ("/v1/chat/completions", 20 * MiB, 300.0),
    ("/v1/completions", 20 * MiB, 300.0),
    ("/v1/audio/transcriptions", 10 * MiB, 1800.0),
    ("/v1/audio/", 10 * MiB, 600.0),
    ("/v1/images/", 10 * MiB, 600.0),
    ("/v1/voices", 10 * MiB, 60.0),
    ("/v1/models/load", 64 * 1024, 300.0),
    ("/v1/models/quantize", 64 * 1024, 600.0),  # loads and rewrites a whole image model
    ("/v1/models/unload", 64 * 1024, 30.0),
    ("/ws/", 1 * MiB, None),  # WebSockets have their own idle timeout
    ("", 1 * MiB, 60.0),
]

# Reachable without a key: probes and the API docs.
PUBLIC_PATHS = frozenset({"/health", "/readyz", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
# Never refused by the connection cap: probes must work under load.
UNCAPPED_PATHS = frozenset({"/health", "/readyz"})


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class RoutePolicy(BaseModel):
    prefix: str
    max_body_bytes: int = Field(ge=0)
    timeout_s: Optional[float] = Field(None, gt=0)


class IngressSettings(BaseModel):
    """What the ingress replica enforces (built by the graph from GraphArgs; keys as digests)."""

    model_config = ConfigDict(extra="forbid")

    api_key_hashes: list[str] = []
    cors_origins: list[str] = []  # ["*"] only in keyless loopback mode
    max_concurrent_requests: int = 24
    routes: list[RoutePolicy] = Field(
        default_factory=lambda: [RoutePolicy(prefix=p, max_body_bytes=b, timeout_s=t) for p, b, t in DEFAULT_ROUTE_POLICIES]
    )

    @property
    def auth_required(self) -> bool:
        return bool(self.api_key_hashes)

    def key_is_valid(self, presented: str) -> bool:
        digest = hash_key(presented)
        # compare_digest on every stored digest: no early exit that would leak which matched.
        return any([hmac.compare_digest(digest, h) for h in self.api_key_hashes])

    def policy_for(self, path: str) -> RoutePolicy:
        for policy in self.routes:
            if path.startswith(policy.prefix):
                return policy
        return RoutePolicy(prefix="", max_body_bytes=1 * MiB, timeout_s=60.0)
