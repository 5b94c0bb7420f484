"""LLM slot metrics: tokens in and out, time to first token, inter-token latency, the
sequences running and queued, prefix-cache hits, the LoRA adapters held, loaded and evicted.

Recorded per model as Ray metrics (exported to Prometheus as ray_ominix_llm_*) and kept as
running totals for the JSON summary. Inter-token latency is per request: the decode time
after the first token divided by the tokens that followed, since chunks may carry several
tokens under load. The sequence gauges are sampled by the replica (deployments/slot_replica.py).
"""

from __future__ import annotations

from deployments.metrics import Counter, Gauge, Histogram, ModelMetrics

LLM_METRICS = {
    "requests": Counter("ominix_llm_requests", "Generations finished"),
    "prompt_tokens": Counter("ominix_llm_prompt_tokens", "Prompt tokens processed"),
    "completion_tokens": Counter("ominix_llm_generated_tokens", "Tokens generated"),
    "cache_hits": Counter("ominix_llm_prefix_cache_hits", "Generations whose prompt started from the prefix cache"),
    "cached_tokens": Counter("ominix_llm_prefix_cached_tokens", "Prompt tokens served from the prefix cache"),
    "ttft": Histogram("ominix_llm_time_to_first_token_ms", "Time to first token"),
    "itl": Histogram("ominix_llm_inter_token_latency_ms", "Mean inter-token latency per request"),
    "running_sequences": Gauge("ominix_llm_running_sequences", "Sequences in the decode batch"),
    "queued_sequences": Gauge("ominix_llm_queued_sequences", "Sequences waiting for a place in the decode batch"),
    # Speculative decoding (vLLM's spec_decode_num_draft_tokens / _accepted_tokens): the
    # acceptance rate is accepted / drafted.
    "draft_tokens": Counter("ominix_llm_spec_decode_draft_tokens", "Drafted tokens the model checked"),
    "accepted_tokens": Counter("ominix_llm_spec_decode_accepted_tokens", "Drafted tokens the model accepted"),
    # LoRA adapters, by the model they run on (a request on an adapter counts in the metrics
    # above under the adapter's name, its `model`: requests, tokens and latencies per adapter).
    "adapters_loaded": Gauge("ominix_llm_adapters_loaded", "LoRA adapters the replica holds loaded into the model"),
    "adapter_loads": Counter("ominix_llm_adapter_loads", "LoRA adapters loaded into the model"),
    "adapter_evictions": Counter(
        "ominix_llm_adapter_evictions",
        "LoRA adapters evicted to make room for another (llm.max_adapters_per_replica)",
    ),
}


class GenerationMetrics(ModelMetrics):
    def __init__(self):
        super().__init__(LLM_METRICS)
        self._sampled: dict[str, tuple[int, int]] = {}  # the engines' speculation totals, last sampled

    def first_token(self, model: str, seconds: float) -> None:
        self.observe(model, "ttft", seconds * 1000)

    def finished(
        self, model: str, prompt_tokens: int, completion_tokens: int, decode_seconds: float, cached_tokens: int = 0
    ) -> None:
        self.add(model, "requests")
        self.add(model, "prompt_tokens", prompt_tokens)
        self.add(model, "completion_tokens", completion_tokens)
        if cached_tokens:
            self.add(model, "cache_hits")
            self.add(model, "cached_tokens", cached_tokens)
        if completion_tokens > 1:
            self.observe(model, "itl", decode_seconds * 1000 / (completion_tokens - 1))

    def speculation(self, totals: dict[str, tuple[int, int]]) -> None:
        """{model: (drafted, accepted)} since each engine started: the counters grow by what
        is new since the last sample (a count that went down is a new engine's, from 0)."""
        for model, counts in totals.items():
            last = self._sampled.get(model, (0, 0))
            for name, value, before in zip(("draft_tokens", "accepted_tokens"), counts, last):
                grown = value - before if value >= before else value
                if grown > 0:
                    self.add(model, name, grown)
            self._sampled[model] = counts

    def adapters(self, held: dict[str, int]) -> None:
        """{model: adapters held on it}; a model sampled before and holding none falls to 0."""
        sampled = [m for m, t in self.totals.items() if "adapters_loaded" in t]
        for model in dict.fromkeys([*held, *sampled]):
            self.set(model, "adapters_loaded", held.get(model, 0))

    def sequences(self, counts: dict[str, tuple[int, int]]) -> None:
        """{model: (running, queued)} of the engines the replica holds; a model sampled before
        and no longer held falls to 0 rather than keeping its last counts."""
        sampled = [m for m, t in self.totals.items() if "running_sequences" in t]
        for model in dict.fromkeys([*counts, *sampled]):
            running, queued = counts.get(model, (0, 0))
            self.set(model, "running_sequences", running)
            self.set(model, "queued_sequences", queued)
