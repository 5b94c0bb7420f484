"""The sampling parameters of one generation request, as the LLM and VLM engines take them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from deployments.protocol.generation import SamplingUsed
from deployments.protocol.openai import SamplingRequest


@dataclass
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: Optional[float] = None
    presence_penalty: Optional[float] = None
    frequency_penalty: Optional[float] = None
    logit_bias: Optional[dict[int, float]] = None
    seed: Optional[int] = None
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    min_tokens: int = 0  # no end-of-sequence token before this many

    @classmethod
    def from_request(cls, request: SamplingRequest, max_tokens: int, defaults: dict[str, Any]) -> SamplingParams:
        def pick(name: str, fallback: Any) -> Any:
            value = getattr(request, name)
            return value if value is not None else defaults.get(name, fallback)

        return cls(
            max_tokens=max_tokens,
            temperature=pick("temperature", 1.0),
            top_p=pick("top_p", 1.0),
            top_k=pick("top_k", 0),
            min_p=pick("min_p", 0.0),
            repetition_penalty=pick("repetition_penalty", None),
            presence_penalty=request.presence_penalty,
            frequency_penalty=request.frequency_penalty,
            logit_bias={int(k): v for k, v in (request.logit_bias or {}).items()} or None,
            seed=request.seed,
            stop=request.stop_list(),
            ignore_eos=request.ignore_eos,
            min_tokens=request.min_tokens or 0,
        )

    def used(self) -> SamplingUsed:
        """What the generation samples with, as the first chunk reports it."""
        return SamplingUsed(
            temperature=self.temperature,
            top_p=self.top_p,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0,
        )
