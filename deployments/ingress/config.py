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

from deployments.slots import all_routes

MiB = 1024 * 1024

# Reachable without a key: probes, the API docs and the demo page (whose requests carry the
# key typed into it), with their static files.
PUBLIC_PATHS = frozenset({"/health", "/readyz", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json", "/demo"})
PUBLIC_PREFIXES = ("/docs/assets/", "/demo/")
# Never refused by the connection cap: probes must work under load, and so must the page that
# shows an operator what the graph is doing.
UNCAPPED_PATHS = frozenset({"/health", "/readyz", "/demo"})
UNCAPPED_PREFIXES = ("/demo/",)


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


def is_uncapped(path: str) -> bool:
    return path in UNCAPPED_PATHS or path.startswith(UNCAPPED_PREFIXES)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class RoutePolicy(BaseModel):
    """Body cap and timeout of the routes under `prefix` (from the slot registry: the slot
    that serves them says what they allow; the most specific prefix applies)."""

    prefix: str
    max_body_bytes: int = Field(ge=0)
    timeout_s: Optional[float] = Field(None, gt=0)


class IngressSettings(BaseModel):
    """What the ingress replica enforces (built by the graph from GraphArgs; keys as digests)."""

    model_config = ConfigDict(extra="forbid")

    api_key_hashes: list[str] = []
    cors_origins: list[str] = []  # ["*"] only in keyless loopback mode
    max_concurrent_requests: int = 24
    state_dir: Optional[str] = None  # where an ingress without Control keeps its records
    routes: list[RoutePolicy] = Field(
        default_factory=lambda: [
            RoutePolicy(prefix=r.prefix, max_body_bytes=r.max_body_bytes, timeout_s=r.timeout_s) for r in all_routes()
        ]
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
