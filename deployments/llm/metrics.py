"""LLM slot metrics: tokens in and out, time to first token, inter-token latency.

Recorded per model as Ray Serve metrics (exported to Prometheus as ray_ominix_llm_*) and kept
as running totals for the JSON summary. Inter-token latency is per request: the decode time
after the first token divided by the tokens that followed, since chunks may carry several
tokens under load.
"""

from __future__ import annotations

from deployments.metrics import Counter, Histogram, ModelMetrics

LLM_METRICS = {
    "requests": Counter("ominix_llm_requests", "Generations finished"),
    "prompt_tokens": Counter("ominix_llm_prompt_tokens", "Prompt tokens processed"),
    "completion_tokens": Counter("ominix_llm_completion_tokens", "Tokens generated"),
    "ttft": Histogram("ominix_llm_time_to_first_token_ms", "Time to first token"),
    "itl": Histogram("ominix_llm_inter_token_latency_ms", "Mean inter-token latency per request"),
}


class GenerationMetrics(ModelMetrics):
    def __init__(self):
        super().__init__(LLM_METRICS)

    def first_token(self, model: str, seconds: float) -> None:
        self.observe(model, "ttft", seconds * 1000)

    def finished(self, model: str, prompt_tokens: int, completion_tokens: int, decode_seconds: float) -> None:
        self.add(model, "requests")
        self.add(model, "prompt_tokens", prompt_tokens)
        self.add(model, "completion_tokens", completion_tokens)
        if completion_tokens > 1:
            self.observe(model, "itl", decode_seconds * 1000 / (completion_tokens - 1))
