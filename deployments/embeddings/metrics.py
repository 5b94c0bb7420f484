"""Embeddings slot metrics: requests, inputs and tokens embedded, latency in the slot
(tokenizing, batching, the forward pass), per model. Prometheus: ray_ominix_embeddings_*."""

from __future__ import annotations

from deployments.metrics import Counter, Histogram, ModelMetrics

EMBEDDINGS_METRICS = {
    "requests": Counter("ominix_embeddings_requests", "Embedding requests finished"),
    "inputs": Counter("ominix_embeddings_inputs", "Inputs embedded"),
    "prompt_tokens": Counter("ominix_embeddings_prompt_tokens", "Tokens embedded"),
    "latency": Histogram("ominix_embeddings_latency_ms", "Embedding time in the slot (tokenize, batch, model)"),
}


class EmbeddingsMetrics(ModelMetrics):
    def __init__(self):
        super().__init__(EMBEDDINGS_METRICS)

    def embedded(self, model: str, inputs: int, tokens: int, seconds: float) -> None:
        self.add(model, "requests")
        self.add(model, "inputs", inputs)
        self.add(model, "prompt_tokens", tokens)
        self.observe(model, "latency", seconds * 1000)
