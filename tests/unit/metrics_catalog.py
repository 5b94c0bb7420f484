"""Every metric the graph exports through Ray, from the modules that declare them: what the
docs page (docs/metrics.md) and the Grafana dashboard (docs/grafana/ominix-serve.json) are
checked against."""

from deployments.asr.metrics import ASR_METRICS
from deployments.embeddings.metrics import EMBEDDINGS_METRICS
from deployments.image.metrics import IMAGE_METRICS
from deployments.ingress.metrics import INGRESS_METRICS
from deployments.llm.metrics import LLM_METRICS
from deployments.metrics import REPLICA_METRICS
from deployments.tts.metrics import TTS_METRICS
from deployments.vlm.metrics import VLM_METRICS

ALL_METRICS = [
    spec
    for declared in (
        INGRESS_METRICS,
        REPLICA_METRICS,
        LLM_METRICS,
        ASR_METRICS,
        TTS_METRICS,
        IMAGE_METRICS,
        VLM_METRICS,
        EMBEDDINGS_METRICS,
    )
    for spec in declared.values()
]


def prometheus_names(spec) -> list[str]:
    """The series names Ray exports for a metric (counters get `_total`; histograms their
    `_bucket`, `_sum` and `_count`)."""
    base = f"ray_{spec.name}"
    if spec.kind == "counter":
        return [f"{base}_total"]
    if spec.kind == "histogram":
        return [f"{base}_bucket", f"{base}_sum", f"{base}_count"]
    return [base]
