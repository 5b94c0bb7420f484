"""VLM slot metrics: generations, images, prompt and generated tokens, time in the slot, per
model. Prometheus: ray_ominix_vlm_*."""

from __future__ import annotations

from deployments.metrics import Counter, Histogram, ModelMetrics

VLM_METRICS = {
    "requests": Counter("ominix_vlm_requests", "Generations finished"),
    "images": Counter("ominix_vlm_images", "Images in finished generations"),
    "prompt_tokens": Counter("ominix_vlm_prompt_tokens", "Prompt tokens processed (image tokens included)"),
    "completion_tokens": Counter("ominix_vlm_generated_tokens", "Tokens generated"),
    "latency": Histogram("ominix_vlm_latency_ms", "Generation time in the VLM slot"),
}


class VLMMetrics(ModelMetrics):
    def __init__(self):
        super().__init__(VLM_METRICS)

    def finished(self, model: str, images: int, prompt_tokens: int, completion_tokens: int, seconds: float) -> None:
        self.add(model, "requests")
        self.add(model, "images", images)
        self.add(model, "prompt_tokens", prompt_tokens)
        self.add(model, "completion_tokens", completion_tokens)
        self.observe(model, "latency", seconds * 1000)
