"""Image slot metrics: generations, images, denoising steps and generation time, per model.
Prometheus: ray_ominix_image_*."""

from __future__ import annotations

from deployments.metrics import Counter, Histogram, ModelMetrics

IMAGE_METRICS = {
    "requests": Counter("ominix_image_requests", "Generations finished (completed, failed or cancelled)"),
    "images": Counter("ominix_image_images", "Images requested by finished generations"),
    "steps": Counter("ominix_image_steps", "Denoising steps requested by finished generations"),
    "latency": Histogram("ominix_image_latency_ms", "Generation time in the image slot"),
}


class ImageMetrics(ModelMetrics):
    def __init__(self):
        super().__init__(IMAGE_METRICS)

    def generated(self, model: str, images: int, steps: int, seconds: float) -> None:
        self.add(model, "requests")
        self.add(model, "images", images)
        self.add(model, "steps", images * steps)
        self.observe(model, "latency", seconds * 1000)
