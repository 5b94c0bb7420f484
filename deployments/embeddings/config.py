"""Configuration of the embeddings slot (the `embeddings:` block of the graph args)."""

from __future__ import annotations

from pydantic import Field

from deployments.embeddings.minilm import MINILM_ID
from deployments.slot_types import SLOT_DEFAULT, SlotModelsConfig

# OpenAI's model names: the slot's default here (its vectors keep the default model's size:
# 384 for all-MiniLM-L6-v2, not OpenAI's 1536 or 3072).
OPENAI_NAMES = ("text-embedding-3-small", "text-embedding-3-large", "text-embedding-ada-002")


class EmbeddingsSlotConfig(SlotModelsConfig):
    default_model: str = Field(MINILM_ID, description="Served when a request names no model; loaded at start-up")
    aliases: dict[str, str] = Field(
        default_factory=lambda: dict.fromkeys(OPENAI_NAMES, SLOT_DEFAULT),
        description="Other names requests may use as `model` (OpenAI's text-embedding-3-small, ...) -> an allowed id or `default`",
    )
    max_batch_size: int = Field(
        32, ge=1, description="Requests whose inputs share one forward pass (@serve.batch); 1: one at a time"
    )
    batch_wait_s: float = Field(0.005, ge=0, description="How long a batch waits for more requests once one is in")
    max_inputs_per_pass: int = Field(
        256, ge=1, description="Inputs in one forward pass; a larger batch is split (bounds its memory)"
    )
    matryoshka_models: list[str] = Field(
        default_factory=list,
        description="Model ids whose vectors may be truncated (`dimensions`), beyond those their files mark",
    )

    def max_ongoing_requests(self) -> int:
        # Tokenized before they join a batch: room for two full batches, at least 64.
        return max(64, 2 * self.max_batch_size)
