"""LLM slot metrics: tokens in and out, time to first token, inter-token latency.

Recorded per model as Ray Serve metrics (exported to Prometheus as ray_ominix_llm_*) and kept
as running totals for the JSON summary. Inter-token latency is per request: the decode time
after the first token divided by the tokens that followed, since chunks may carry several
tokens under load.
"""

from __future__ import annotations

from collections import defaultdict

_MS_BOUNDARIES = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000]


class GenerationMetrics:
    def __init__(self):
        self.totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._serve = None
        try:  # only inside a Serve replica
            from ray.serve.metrics import Counter, Histogram

            tags = ("model",)
            self._serve = {
                "prompt_tokens": Counter("ominix_llm_prompt_tokens", "Prompt tokens processed", tags),
                "completion_tokens": Counter("ominix_llm_completion_tokens", "Tokens generated", tags),
                "ttft": Histogram("ominix_llm_time_to_first_token_ms", "Time to first token", _MS_BOUNDARIES, tags),
                "itl": Histogram("ominix_llm_inter_token_latency_ms", "Mean inter-token latency per request", _MS_BOUNDARIES, tags),
            }
        except Exception:
            pass

    def first_token(self, model: str, seconds: float) -> None:
        self._observe(model, "ttft", seconds * 1000)

    def finished(self, model: str, prompt_tokens: int, completion_tokens: int, decode_seconds: float) -> None:
        t = self.totals[model]
        t["requests"] += 1
        t["prompt_tokens"] += prompt_tokens
        t["completion_tokens"] += completion_tokens
        if self._serve:
            self._serve["prompt_tokens"].inc(prompt_tokens, tags={"model": model})
            self._serve["completion_tokens"].inc(completion_tokens, tags={"model": model})
        if completion_tokens > 1:
            self._observe(model, "itl", decode_seconds * 1000 / (completion_tokens - 1))

    def _observe(self, model: str, name: str, ms: float) -> None:
        t = self.totals[model]
        t[f"{name}_count"] += 1
        t[f"{name}_ms_sum"] += ms
        t[f"{name}_ms_max"] = max(t[f"{name}_ms_max"], ms)
        if self._serve:
            self._serve[name].observe(ms, tags={"model": model})

    def summary(self, model: str) -> dict[str, float]:
        t = dict(self.totals.get(model, {}))
        for name in ("ttft", "itl"):
            if t.get(f"{name}_count"):
                t[f"{name}_ms_mean"] = t[f"{name}_ms_sum"] / t[f"{name}_count"]
        return t
