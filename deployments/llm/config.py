"""Configuration of the LLM slot (the `llm:` block of the graph args)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import Field

from deployments.llm.smollm2 import SMOLLM2_ID
from deployments.llm.tiny_model import TINY_LLM_ID
from deployments.slot_types import SLOT_DEFAULT, SlotModelsConfig

# OminiX-API's LLM families (its README's `"model": "qwen3"`): names for whatever the slot serves.
OMINIX_FAMILIES = ("qwen3", "mistral", "glm")


class LLMSlotConfig(SlotModelsConfig):
    default_model: str = Field(SMOLLM2_ID, description="Served when a request names no model; loaded at start-up")
    aliases: dict[str, str] = Field(
        default_factory=lambda: dict.fromkeys(OMINIX_FAMILIES, SLOT_DEFAULT),
        description="Other names requests may use as `model` (OminiX-API's qwen3, mistral, glm) -> an allowed id or `default`",
    )
    # The random-weight tiny model stays servable by name: tests that need a code path, not
    # an answer, run it ~40x faster.
    models: list[str] = Field(
        default_factory=lambda: [TINY_LLM_ID],
        description="Other model ids requests may name (the allow-list)",
    )
    max_models_per_replica: int = Field(
        2, ge=1, description="Models one replica keeps loaded at once (the least recently used is evicted)"
    )
    max_batch_size: int = Field(32, ge=1, description="Sequences decoded together per replica")
    prefill_batch_size: int = Field(8, ge=1, description="Prompts prefilled together per step")
    prefill_step_size: Optional[int] = Field(
        None,
        ge=16,
        description="Prompt tokens processed per prefill step; unset: 512 on MLX's CPU backend, 2048 on Metal (measured)",
    )
    batching: bool = Field(True, description="False: one sequence at a time (a baseline)")
    default_max_tokens: int = Field(
        2048, ge=1, description="Tokens a chat completion generates when it sets no max_tokens (text completions: 16)"
    )
    max_n: int = Field(
        8, ge=1, description="Choices one request may ask for (`n`); more is a 400. The n share one prefill and batch"
    )
    schema_attempts: int = Field(
        4,
        ge=1,
        description="Attempts a structured answer gets to validate against its JSON Schema as sent (what the "
        "grammar cannot enforce, uniqueItems, if/then/else..., is checked on the finished answer); a failed one is "
        "generated again with another seed, and a choice that never passes ends with finish_reason schema_not_met",
    )
    prefix_cache_entries: int = Field(
        10, ge=0, description="Prompt KV caches kept for reuse by later prompts with the same start; 0: off"
    )
    prefix_cache_bytes: int = Field(2 << 30, ge=0, description="Memory the prefix cache and the running batch may hold")
    disk_cache_bytes: int = Field(
        4 << 30,
        ge=0,
        description="Disk the prompt cache's second tier may use under <cache_dir>/prompt-cache, shared by the "
        "node's LLM replicas and kept across restarts (least recently used evicted); 0: off",
    )
    disk_cache_min_tokens: int = Field(
        256, ge=1, description="Prompt caches of at least this many tokens are also written to the disk tier"
    )
    cpu_dtype: Literal["auto", "float32", "keep"] = Field(
        "auto",
        description="On MLX's CPU backend: auto makes bf16/fp16/quantized weights dense float32 when the copy fits "
        "cpu_upcast_max_bytes (BLAS-fast there); float32 always; keep never. Metal keeps the weights as they are",
    )
    cpu_upcast_max_bytes: int = Field(
        4 << 30, ge=0, description="The largest dense float32 copy cpu_dtype auto makes of one model's weights"
    )

    def max_ongoing_requests(self) -> int:
        return self.max_batch_size  # Serve sends work to batch, never to queue inside a replica

    def engine_config(self, disk_cache_dir: Path | None = None):
        """The engine's settings; the disk tier only with a directory (the replica's cache dir)."""
        from deployments.llm.engine import EngineConfig  # MLX: only where an engine starts

        return EngineConfig(
            max_batch_size=self.max_batch_size,
            prefill_batch_size=self.prefill_batch_size,
            prefill_step_size=self.prefill_step_size,
            batching=self.batching,
            default_max_tokens=self.default_max_tokens,
            prefix_cache_entries=self.prefix_cache_entries,
            prefix_cache_bytes=self.prefix_cache_bytes,
            cpu_dtype=self.cpu_dtype,
            cpu_upcast_max_bytes=self.cpu_upcast_max_bytes,
            max_n=self.max_n,
            disk_cache_dir=str(disk_cache_dir) if disk_cache_dir else None,
            disk_cache_bytes=self.disk_cache_bytes,
            disk_cache_min_tokens=self.disk_cache_min_tokens,
        )

    def catalog_entry(self, cache_dir: Path) -> dict:
        # The ingress refuses n over the limit before the slot sees the request, and resamples a
        # structured answer that fails its schema (deployments/ingress/serving/structured.py).
        options = {"max_n": self.max_n, "schema_attempts": self.schema_attempts}
        return {**super().catalog_entry(cache_dir), "options": options}
