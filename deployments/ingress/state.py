"""What the ingress routers need from the running ingress: the clients of the deployments
behind it, the model catalog and the settings.

`create_app(state)` stores it on `app.state`, and routers get it through the `ingress_state`
dependency, so the same app runs inside the Ingress deployment (real handles) and in a test
process (tests/ingress: fake clients, httpx's ASGITransport), with no Ray in between.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from starlette.requests import HTTPConnection

from deployments.ingress.catalog import ModelCatalog, slot_disabled
from deployments.ingress.config import IngressSettings
from deployments.ingress.metrics import IngressMetrics
from deployments.protocol.errors import unavailable


@dataclass
class IngressState:
    catalog: ModelCatalog
    settings: IngressSettings = field(default_factory=IngressSettings)
    metrics: IngressMetrics = field(default_factory=IngressMetrics)
    slots: dict[str, Any] = field(default_factory=dict)  # slot name -> SlotClient, enabled slots only
    control: Optional[Any] = None  # DeploymentClient of the Control deployment
    cuda: Optional[Any] = None  # DeploymentClient of the CUDA proxy, when a route is configured
    cuda_models: frozenset[str] = frozenset()  # public ids routed to CUDA (exact match)
    downloads: Optional[Any] = None  # the DownloadManager (deployments/downloads), made on first use
    training: Optional[Any] = None  # VoiceTraining (ingress/serving/training.py), made on first use
    records: Optional[Any] = None  # the graph's record store (ingress/serving/records.py), on first use
    adapters: Optional[Any] = None  # the LLM's run-time LoRA adapters (ingress/serving/adapters.py), on first use
    # System programs this ingress runs without, with the fix (deployments/system_deps.py).
    system_warnings: list[str] = field(default_factory=list)

    def slot(self, name: str) -> Any:
        """The slot's client; a slot this graph does not run answers `slot_disabled`."""
        client = self.slots.get(name)
        if client is None:
            raise slot_disabled(name)
        return client

    def download_manager(self) -> Any:
        if self.downloads is None:
            from deployments.downloads.manager import DownloadManager

            self.downloads = DownloadManager()  # huggingface_hub's cache and endpoint (HF_ENDPOINT)
        return self.downloads

    def voice_training(self) -> Any:
        if self.training is None:
            from deployments.ingress.serving.training import VoiceTraining

            self.training = VoiceTraining(self.record_store())
        return self.training

    def record_store(self) -> Any:
        """Control's record store, shared by every ingress replica; without Control (an ingress
        built alone, as in tests) a private one in the state directory."""
        if self.records is None:
            from deployments.ingress.serving.records import ControlRecords, LocalRecords

            if self.control is not None:
                self.records = ControlRecords(self.control)
            else:
                self.records = LocalRecords.in_dir(self.state_dir())
        return self.records

    def adapter_directory(self) -> Any:
        if self.adapters is None:
            from deployments.ingress.serving.adapters import AdapterDirectory

            self.adapters = AdapterDirectory(self)
        return self.adapters

    def state_dir(self) -> Path:
        from deployments.hub import default_cache_dir

        return Path(self.settings.state_dir) if self.settings.state_dir else default_cache_dir() / "ingress"

    def control_plane(self) -> Any:
        if self.control is None:
            raise unavailable("This graph has no control plane")
        return self.control


def ingress_state(connection: HTTPConnection) -> IngressState:
    """FastAPI dependency (HTTP and WebSocket routes alike)."""
    return connection.app.state.ingress
