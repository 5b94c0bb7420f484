"""What every model slot's deployment shares, so each slot only says what is its own.

A `SlotReplica` subclass carries its slot's entry (`slot`, from its package's slot.py: a replica
never looks up the registry) and says how to start its engine (`start_engine`); this base
validates the slot's config, holds the replica's engines (`ReplicaModels`: Serve model
multiplexing plus the slot's current default), follows the control plane (`SlotAgent`, which
also unloads idle models: `idle_unload_s`, `keep_default_loaded`), warns when a random-weight
built-in serves, answers the health check, gives GET /metrics one summary shape for every
slot, and samples the gauges Ray exports (the models it holds, its memory, the slot's own:
deployments/metrics.py). Engines are injected the way Ray Serve LLM's
`LLMServer(engine_cls=...)` takes them: the deployment never builds model code.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, ClassVar, Optional

from deployments import accelerator, blas, system_deps
from deployments.control.agent import SlotAgent, memory_snapshot
from deployments.control.idle import IdlePolicy
from deployments.control.replica_models import ReplicaModels
from deployments.hub import default_cache_dir, resolve_model_dir
from deployments.metrics import LoadedModelsGauge, ModelMetrics, record_memory
from deployments.slot_types import Slot

logger = logging.getLogger("ray.serve")

# How often a replica samples its gauges; Ray exports them on its own period (about 10 s:
# RAY_metrics_report_interval_ms), so a shorter one would only add work.
GAUGE_PERIOD_S = 5.0


class SlotReplica:
    slot: ClassVar[Slot]  # the slot's entry: `SLOT` of its package's slot.py
    file_patterns: ClassVar[list[str]]  # what to fetch of a Hugging Face repo for this slot
    metrics_class: ClassVar[type[ModelMetrics]]

    async def __init__(self, config: dict, cache_dir: Optional[str] = None, control=None):
        # Before any engine imports mlx (engines import it lazily): MLX's Linux wheel would
        # otherwise multiply with the slow reference BLAS it bundles (deployments/blas.py).
        # Only model replicas load a BLAS; the ingress, Control and the proxy never do.
        choice = blas.select()  # logs its own WARNING on the reference BLAS
        # Which device this replica's models compute on (MLX's CUDA build on an NVIDIA machine:
        # docs/nvidia.md), said once at start; Control hears it with every report.
        backend = accelerator.runtime()
        logger.info(
            "%s slot: MLX runs on %s (%s)", self.slot.label, accelerator.label(backend.as_dict()), backend.build
        )
        tools = system_deps.replica_warnings(self.slot.system_tools)
        for line in tools:
            logger.warning("%s slot: %s", self.slot.label, line)
        self.config = self.slot.config.model_validate(config)
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        self.metrics = self.metrics_class()
        self.models = ReplicaModels(
            self.slot.name,
            self.load_resident,
            self.config.max_models_per_replica,
            max_adapters=self.adapter_limit(),
            describe=self.describe_resident,
            evicted=self.resident_evicted,
        )
        self.agent = SlotAgent(
            self.slot.name,
            control,
            load_default=self.models.load,
            unload_all=self.unload_all,
            loaded_models=self.models.loaded,
            fallback_default=self.config.default_model,
            warnings=[line for line in [blas.slow_warning(choice), *tools] if line],
            models=self.models,
            idle_policy=IdlePolicy(self.config.idle_unload_s, self.config.keep_default_loaded),
            ranks=self.ranks,
            adapters_changed=self.adapters_changed if self.adapter_limit() else None,
        )
        self._loaded_gauge = LoadedModelsGauge()
        await self.setup()
        await self.agent.start()  # the slot's current default is loaded before the replica serves
        self._gauges = asyncio.create_task(self._sample_gauges_forever())

    # ------------------------------------------------------------------ what a slot provides

    async def setup(self) -> None:
        """Slot-specific state, made before the default model loads."""

    async def start_engine(self, model_id: str, model_dir: Path) -> Any:
        raise NotImplementedError

    def sample_gauges(self) -> None:
        """Set the slot's own gauges (sequences running, sessions open) from its engines."""

    def engine_summary(self, engine: Any) -> dict[str, Any]:
        """The engine's own counters, shown next to the slot metrics in GET /metrics."""
        stats = engine.stats
        return dict(stats) if isinstance(stats, dict) else dict(vars(stats))

    def ranks(self) -> Optional[list[dict]]:
        """A replica that is several processes (a sharded LLM's gang): each with its node."""
        return None

    def models_dir(self) -> Optional[str]:
        """Local model directories under this path may be loaded too."""
        return self.config.models_dir

    # A slot whose models take adapters (the LLM's LoRA) holds them in its multiplexer too
    # (deployments/control/replica_models.py); the others hold models only.

    def adapter_limit(self) -> int:
        """Adapters one replica holds at once; 0: the slot takes none."""
        return 0

    def describe_resident(self, model_id: str) -> tuple[str, Optional[str]]:
        """What a multiplexed id names: ("model", None) or ("adapter", the model it runs on)."""
        return "model", None

    async def load_resident(self, model_id: str) -> Any:
        """Load what the multiplexed id names (a model's engine, unless the slot says otherwise)."""
        return await self._load_engine(model_id)

    def resident_evicted(self, model_id: str, kind: str, parent: Optional[str]) -> None:
        """A model or adapter evicted to make room for another (the slot may count it)."""

    async def adapters_changed(self, adapters: dict[str, dict]) -> None:
        """The slot's run-time adapters, from Control, each time they change."""

    # ------------------------------------------------------------------ shared behaviour

    async def _load_engine(self, model_id: str) -> Any:
        model_dir = await asyncio.to_thread(self.model_dir, model_id)
        engine = await self.start_engine(model_id, model_dir)
        if model_id in self.slot.random_builtins:
            logger.warning(
                "%s slot serves the built-in model '%s': random weights, its output is "
                "meaningless (it exercises the code path). For a real model: %s",
                self.slot.label,
                model_id,
                self.slot.real_model_hint,
            )
        return engine

    def model_dir(self, model_id: str) -> Path:
        return resolve_model_dir(
            model_id, builtins=self.slot.builtins, cache_dir=self.cache_dir, allow_patterns=self.file_patterns
        )

    async def engine(self) -> Any:
        """The engine for the current request: the model it names, else the slot's default."""
        return await self.models.for_request(self.agent.default_model, self.config.allowed_models(), self.models_dir())

    async def unload_all(self) -> None:
        await self.models.unload_all()

    async def _sample_gauges_forever(self) -> None:
        while True:
            self.sample_replica_gauges()
            await asyncio.sleep(GAUGE_PERIOD_S)

    def sample_replica_gauges(self) -> None:
        """The models held, the replica's memory, and the slot's own gauges, once."""
        try:
            self._loaded_gauge.sample(self.models.loaded())
            record_memory(memory_snapshot())
            self.sample_gauges()
        except Exception:  # a gauge never takes the replica down
            logger.debug("Sampling the %s slot's gauges failed", self.slot.name, exc_info=True)

    def metrics_summary(self) -> dict[str, Any]:
        """GET /metrics: this replica's numbers per model (slot metrics and engine counters)."""
        from ray import serve

        models = self.metrics.summaries()
        for engine in self.models.engines():
            models.setdefault(engine.model_id, {}).update(self.engine_summary(engine))
        return {"replica": serve.get_replica_context().replica_id.unique_id, "models": models}

    def check_health(self) -> None:
        self.models.check_health()
        self.check_gang()

    def check_gang(self) -> None:
        """A replica of several processes: raise when one of them is gone."""
