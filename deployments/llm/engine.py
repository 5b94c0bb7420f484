"""The LLM engine: one MLX model, one thread that owns it, continuous batching.

Requests arrive from the replica's asyncio loop; the engine thread inserts them into mlx-lm's
`BatchGenerator`, steps the batch, and hands each sequence's new text back to its request's
stream (EngineThread.stream: deltas that pile up while the consumer is busy come as one). A
sequence joins the running batch as soon as it arrives and leaves it when it finishes, hits a
stop string, or its client goes away, without waiting for the others.
With `batching=False` the same loop decodes one sequence at a time (what a single inference
thread such as OminiX-API's does), which the benchmarks use as a baseline.

No Ray here: the Serve deployment is a thin wrapper around this class.
"""

from __future__ import annotations

import json
import logging
import queue
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any, Optional

from deployments.engine_thread import STOP, EngineThread, Message, unloaded
from deployments.generation.output import OutputParser, ParsedText
from deployments.generation.sampling import SamplingParams
from deployments.llm.prefix_cache import ANSWER, PrefillPlan, PrefixCache
from deployments.llm.prompts import Prompt
from deployments.llm.tool_calls import parse_tool_calls
from deployments.protocol.errors import APIError, invalid_request, server_error
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import PromptTokensDetails, UsageInfo

logger = logging.getLogger(__name__)


@dataclass
class EngineConfig:
    max_batch_size: int = 32  # sequences decoded together
    prefill_batch_size: int = 8  # prompts prefilled together
    prefill_step_size: int = 2048  # prompt tokens per prefill step
    batching: bool = True
    default_max_tokens: int = 2048
    prefix_cache_entries: int = 10  # prompt caches kept for reuse; 0 turns the cache off
    prefix_cache_bytes: int = 2 << 30
    cpu_dtype: str = "auto"  # auto | float32 | keep: deployments/llm/dtype_policy.py
    cpu_upcast_max_bytes: int = 4 << 30


@dataclass(eq=False)
class _Sequence(Message):
    """One request's life inside the engine: the inbox message and its decoding state."""

    prompt: Prompt
    params: SamplingParams
    tools: Optional[list[dict[str, Any]]]
    uid: Optional[int] = None
    parser: Optional[OutputParser] = None
    detokenizer: Any = None
    completion_tokens: int = 0
    made_tool_call: bool = False
    cached_tokens: int = 0  # prompt tokens whose prefill the prefix cache saved
    keep_at_ends: list[str] = field(default_factory=list)  # see PrefixCache


# How a token left its sequence (see LLMEngine._on_token).
_RUNNING, _FINISHED, _STOPPED_BY_PARSER = object(), object(), object()


class LLMEngine(EngineThread[_Sequence]):
    """Owns one model. Create with `await LLMEngine.start(model_id, model_dir, config)`."""

    kind = "llm"

    def __init__(self, model_id: str, model_dir: Path, config: EngineConfig):
        super().__init__(model_id, model_dir)
        self.config = config
        self.tokenizer: Any = None
        self.context_length: Optional[int] = None
        self.generation_defaults: dict[str, Any] = {}
        self.prefix_cache: Optional[PrefixCache] = None
        # Written by the engine thread only; read for status and tests.
        self.stats = {"running": 0, "finished": 0, "aborted": 0, "generated_tokens": 0}

    # ------------------------------------------------------------------ asyncio side

    def resolve_max_tokens(self, prompt_len: int, requested: Optional[int]) -> int:
        room = None if self.context_length is None else self.context_length - prompt_len
        if room is not None and room <= 0:
            raise invalid_request(
                f"The prompt has {prompt_len} tokens; this model's context length is {self.context_length} tokens.",
                "messages",
                "context_length_exceeded",
            )
        if requested is None:
            default = self.config.default_max_tokens
            return default if room is None else min(default, room)
        if room is not None and requested > room:
            raise invalid_request(
                f"This model's context length is {self.context_length} tokens; the prompt "
                f"uses {prompt_len} and max_tokens asks for {requested}.",
                "max_tokens",
                "context_length_exceeded",
            )
        return requested

    def check_params(self, params: SamplingParams) -> None:
        vocab = len(self.tokenizer)
        for token in params.logit_bias or {}:
            if not 0 <= token < vocab:
                raise invalid_request(f"logit_bias: token id {token} is not in [0, {vocab})", "logit_bias")

    def generate(
        self,
        prompt: Prompt,
        params: SamplingParams,
        tools: Optional[list[dict[str, Any]]] = None,
    ) -> AsyncIterator[GenerationChunk]:
        """Stream the generation; closing the iterator early removes it from the batch."""
        return self.stream(_Sequence(prompt, params, tools), merge=_merge_chunks)

    # ------------------------------------------------------------------ engine thread

    def _serve(self) -> None:
        import mlx.core as mx

        self._loop(mx.default_stream(mx.default_device()))

    def _release(self) -> None:
        self._model = None
        self._batch = None
        self.prefix_cache = None

    def _load(self) -> None:
        import mlx_lm

        t0 = time.perf_counter()
        self._model, self.tokenizer, model_config = mlx_lm.load(str(self.model_dir), return_config=True)
        self._apply_dtype_policy()
        self.context_length = model_config.get("max_position_embeddings")
        gen_config = self.model_dir / "generation_config.json"
        if gen_config.exists():
            raw = json.loads(gen_config.read_text())
            self.generation_defaults = {
                k: raw[k]
                for k in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
                if raw.get(k) is not None
            }
        if self.config.prefix_cache_entries > 0:
            self.prefix_cache = PrefixCache(
                self.model_id, self.config.prefix_cache_entries, self.config.prefix_cache_bytes
            )
        logger.info("Loaded %s from %s in %.1fs", self.model_id, self.model_dir, time.perf_counter() - t0)

    def _apply_dtype_policy(self) -> None:
        """Dense float32 on the CPU backend where that is faster and fits (dtype_policy.py)."""
        from deployments.llm import dtype_policy

        weights = dtype_policy.inspect_weights(self._model)
        decision = dtype_policy.decide(
            self.config.cpu_dtype, dtype_policy.on_cpu_backend(), weights, self.config.cpu_upcast_max_bytes
        )
        if decision.upcast:
            dtype_policy.upcast(self._model)
        self.stats["weights"] = "float32" if decision.upcast else weights.form
        self.stats["weights_as_loaded"] = weights.form
        logger.info(
            "%s weights: %s as loaded, %s served (%s)",
            self.model_id,
            weights.form,
            self.stats["weights"],
            decision.reason,
        )

    def _new_batch(self, stream):
        from mlx_lm.generate import BatchGenerator

        size = self.config.max_batch_size if self.config.batching else 1
        prefill = self.config.prefill_batch_size if self.config.batching else 1
        return BatchGenerator(
            self._model,
            completion_batch_size=size,
            prefill_batch_size=min(prefill, size),
            prefill_step_size=self.config.prefill_step_size,
            stream=stream,
        )

    def _loop(self, stream) -> None:
        self._batch = self._new_batch(stream)
        active: dict[int, _Sequence] = {}
        while True:
            if not self._take_inbox(active, block=not active):
                return
            if not active:
                continue
            try:
                prompt_responses, responses = self._batch.next()
                self._keep_prompt_caches(active, prompt_responses)
            except Exception as e:  # never let one bad step kill the replica
                logger.exception("Batch step failed; failing %d sequences", len(active))
                for seq in active.values():
                    self._fail(seq, server_error(f"Generation failed: {e}"))
                active.clear()
                self._batch = self._new_batch(stream)
                continue
            stopped_by_us = []
            for r in responses:
                seq = active.get(r.uid)
                if seq is None:
                    continue
                outcome = self._on_token(seq, r.token, r.finish_reason)
                if outcome is not _RUNNING:
                    del active[r.uid]
                    self.stats["finished"] += 1
                if outcome is _FINISHED:
                    self._keep_cache(r.all_tokens, r.prompt_cache, ANSWER)
                elif outcome is _STOPPED_BY_PARSER:
                    # The batch generator drops the sequences it finishes; these it cannot know.
                    stopped_by_us.append(r.uid)
            if stopped_by_us:
                caches = self._batch.remove(stopped_by_us, return_prompt_caches=self.prefix_cache is not None)
                for cache, tokens in caches.values():
                    self._keep_cache(tokens, cache, ANSWER)
            self.stats["running"] = len(active)
            self.stats["generated_tokens"] += len(responses)

    def _take_inbox(self, active: dict[int, _Sequence], block: bool) -> bool:
        """Admit new sequences and drop abandoned ones. False when the engine must stop."""
        while True:
            try:
                seq = self._inbox.get(timeout=0.5) if block else self._inbox.get_nowait()
            except queue.Empty:
                break
            block = False
            if seq is STOP:
                for running in active.values():
                    self._fail(running, unloaded(self.model_id))
                return False
            if seq.cancelled:  # abandoned before it started
                continue
            try:
                self._admit(seq)
            except APIError as e:
                self._fail(seq, e)
                continue
            except Exception as e:
                logger.exception("Could not start a sequence")
                self._fail(seq, server_error(f"Could not start generation: {e}"))
                continue
            active[seq.uid] = seq
            self.stats["running"] = len(active)
        self._drop_cancelled(active)
        return True

    def _drop_cancelled(self, active: dict[int, _Sequence]) -> None:
        """Sequences whose client went away leave the batch before the next step."""
        gone = [uid for uid, seq in active.items() if seq.cancelled]
        if not gone:
            return
        self._batch.remove(gone)
        for uid in gone:
            del active[uid]
        self.stats["aborted"] += len(gone)
        self.stats["running"] = len(active)

    def _admit(self, seq: _Sequence) -> None:
        from mlx_lm.generate import StopSequences

        tok = self.tokenizer
        think = (tok.think_start, tok.think_end) if tok.has_thinking and seq.prompt.split_reasoning else None
        tool_call = (
            (tok.tool_call_start, tok.tool_call_end)
            if tok.has_tool_calling and seq.tools and tok.tool_call_end
            else None
        )
        seq.parser = OutputParser(
            stop=seq.params.stop, think=think, tool_call=tool_call, initial_state=seq.prompt.initial_state
        )
        seq.detokenizer = tok.detokenizer
        eos = [] if seq.params.ignore_eos else [(t,) for t in tok.eos_token_ids]
        plan = self._plan_prefill(seq.prompt)
        seq.cached_tokens, seq.keep_at_ends = plan.cached, plan.keep_at_ends
        (seq.uid,) = self._batch.insert_segments(
            [plan.segments],
            max_tokens=[seq.params.max_tokens],
            caches=[plan.cache],
            all_tokens=[seq.prompt.token_ids[: plan.cached]],
            samplers=[_make_sampler(seq.params)],
            logits_processors=[_make_logits_processors(seq.params)],
            stop_sequences=[StopSequences(eos)],
        )

    def _plan_prefill(self, prompt: Prompt) -> PrefillPlan:
        if self.prefix_cache is None:
            return PrefillPlan(None, 0, [prompt.token_ids])
        return self.prefix_cache.plan(prompt.token_ids, prompt.system_end)

    def _keep_prompt_caches(self, active: dict[int, _Sequence], prompt_responses: list) -> None:
        """At a segment end inside a prompt, keep the cache so far for later prompts."""
        uids = [
            r.uid
            for r in prompt_responses
            if r.end_of_segment and not r.end_of_prompt and r.uid in active and active[r.uid].keep_at_ends
        ]
        if not uids or self.prefix_cache is None:
            return
        try:
            caches = self._batch.extract_cache(uids)
        except Exception:  # as in _keep_cache: a lost optimisation, not a failed batch
            logger.exception("Could not extract prompt caches; the prefix cache is turned off")
            self.prefix_cache = None
            return
        for uid, (cache, tokens) in caches.items():
            self._keep_cache(tokens, cache, active[uid].keep_at_ends.pop(0))

    def _keep_cache(self, tokens: Optional[list[int]], cache: Optional[list[Any]], kind: str) -> None:
        if self.prefix_cache is None or not tokens or cache is None:
            return
        try:
            self.prefix_cache.keep(tokens, cache, kind)
            # What the running batch holds counts against the same budget (as mlx_lm.server does).
            self.prefix_cache.trim_to(self.config.prefix_cache_bytes - self._batch.prompt_cache_nbytes)
        except Exception:  # the cache only saves time: never fail the running batch for it
            logger.exception("Could not keep a prompt cache; the prefix cache is turned off")
            self.prefix_cache = None

    def _on_token(self, seq: _Sequence, token: int, finish_reason: Optional[str]) -> object:
        """Feed one generated token to its sequence; say whether and how it ended."""
        seq.completion_tokens += 1
        detok = seq.detokenizer
        if finish_reason != "stop":  # an end-of-sequence token is not text
            detok.add_token(token)
        if finish_reason is not None:
            detok.finalize()
        parsed = seq.parser.feed(detok.last_segment)
        if parsed.stopped:
            finish_reason = "stop"
        if finish_reason is None:
            chunk = self._chunk(seq, parsed)
            if not chunk.is_empty():
                self._send(seq, chunk)
            return _RUNNING
        tail = seq.parser.finish()
        merged = ParsedText(
            content=parsed.content + tail.content,
            reasoning=parsed.reasoning + tail.reasoning,
            tool_texts=parsed.tool_texts + tail.tool_texts,
        )
        chunk = self._chunk(seq, merged)
        if finish_reason == "stop" and seq.made_tool_call:
            finish_reason = "tool_calls"
        chunk.finish_reason = finish_reason
        prompt_tokens = len(seq.prompt.token_ids)
        chunk.usage = UsageInfo(
            prompt_tokens=prompt_tokens,
            completion_tokens=seq.completion_tokens,
            total_tokens=prompt_tokens + seq.completion_tokens,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=seq.cached_tokens),
        )
        self._send(seq, chunk)
        self._finish(seq)
        return _STOPPED_BY_PARSER if parsed.stopped else _FINISHED

    def _chunk(self, seq: _Sequence, parsed: ParsedText) -> GenerationChunk:
        chunk = GenerationChunk(content=parsed.content, reasoning_content=parsed.reasoning)
        if parsed.tool_texts:
            calls, failed = parse_tool_calls(parsed.tool_texts, self.tokenizer.tool_parser, seq.tools)
            chunk.tool_calls = calls
            seq.made_tool_call = seq.made_tool_call or bool(calls)
            # A call the parser could not read goes back to the client as text, not into a void.
            for text in failed:
                chunk.content += f"{self.tokenizer.tool_call_start}{text}{self.tokenizer.tool_call_end}"
        return chunk


def _merge_chunks(chunks: list[GenerationChunk]) -> GenerationChunk:
    return reduce(GenerationChunk.merge, chunks)


def _make_sampler(params: SamplingParams):
    from mlx_lm.sample_utils import make_sampler

    if params.temperature == 0 or params.seed is None:
        # Greedy requests share one sampler object, so the batch samples in one call.
        return make_sampler(params.temperature, top_p=params.top_p, min_p=params.min_p, top_k=params.top_k)
    return _seeded_sampler(params)


def _seeded_sampler(params: SamplingParams):
    """A sampler with its own random key: `seed` is reproducible even inside a batch."""
    import mlx.core as mx
    from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p

    key = [mx.random.key(params.seed)]

    def sample(logprobs):
        if 0 < params.top_p < 1.0:
            logprobs = apply_top_p(logprobs, params.top_p)
        if params.min_p:
            logprobs = apply_min_p(logprobs, params.min_p)
        if params.top_k:
            logprobs = apply_top_k(logprobs, params.top_k)
        key[0], sub = mx.random.split(key[0])
        return mx.random.categorical(logprobs * (1.0 / params.temperature), key=sub)

    return sample


def _make_logits_processors(params: SamplingParams):
    from mlx_lm.sample_utils import make_logits_processors

    return make_logits_processors(
        params.logit_bias,
        params.repetition_penalty,
        presence_penalty=params.presence_penalty,
        frequency_penalty=params.frequency_penalty,
    )
