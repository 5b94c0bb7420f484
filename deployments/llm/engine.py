"""The LLM engine: one MLX model, one thread that owns it, continuous batching.

Requests arrive from the replica's asyncio loop; the engine thread inserts them into mlx-lm's
`BatchGenerator`, steps the batch, and hands each sequence's new text back to its request's
stream (EngineThread.stream: deltas that pile up while the consumer is busy come as one). A
sequence joins the running batch as soon as it arrives and leaves it when it finishes, hits a
stop string, or its client goes away, without waiting for the others.
A request for n choices prefills its prompt once: its first sequence prefills all of the
prompt but the last token, then the others start from copies of that KV cache, and all n
decode in the same batch, each with its own sampler (and, with a seed, its own random key).
A constrained request (deployments/llm/constraints.py) compiles its grammar once, off this
thread, and each of its choices gets its own matcher: a logits processor that masks what the
grammar forbids, so the sampler and the log-probabilities only see what the answer may be.
A request may run on a LoRA adapter loaded into the model (`add_adapter`, applied between two
steps): sequences of different adapters and of the base model decode in the same batch, each
row with its own (deployments/llm/lora.py), and each adapter's prompts are cached apart.
With `batching=False` the same loop decodes one sequence at a time (what a single inference
thread such as OminiX-API's does), which the benchmarks use as a baseline.

No Ray here: the Serve deployment is a thin wrapper around this class.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import math
import queue
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from deployments.engine_thread import STOP, EngineThread, Message, unloaded
from deployments.generation.logprobs import TokenBytes, entry
from deployments.generation.output import OutputParser, ParsedText
from deployments.generation.sampling import SamplingParams
from deployments.llm.batch import Sequence
from deployments.llm.constraints import Constraint, GuideCache, Plan, TokenMask, parse_json_calls
from deployments.llm.disk_cache import DiskCache, model_key
from deployments.llm.drafts import SpeculativeSettings
from deployments.llm.gang import Doorbell, Membership, RoundChannel, join_group, load_sharded
from deployments.llm.lora import AdapterChange, AdapterRef, AdapterStage, linear_layers
from deployments.llm.prefix_cache import ANSWER, SYSTEM, PrefillPlan, PrefixCache, load_cache, save_cache
from deployments.llm.prompts import Prompt
from deployments.llm.sampler import RowSampler
from deployments.llm.tool_calls import parse_tool_calls
from deployments.protocol.errors import APIError, invalid_request, server_error
from deployments.protocol.generation import GenerationChunk, merge_by_choice, merged_chunks
from deployments.protocol.logprobs import TokenLogprob
from deployments.protocol.openai import PromptTokensDetails, UsageInfo

logger = logging.getLogger(__name__)


@dataclass
class EngineConfig:
    max_batch_size: int = 32  # sequences decoded together
    prefill_batch_size: int = 8  # prompts prefilled together
    prefill_step_size: Optional[int] = None  # prompt tokens per prefill step; None: prefill_step()
    batching: bool = True
    default_max_tokens: int = 2048
    prefix_cache_entries: int = 10  # prompt caches kept for reuse; 0 turns the cache off
    prefix_cache_bytes: int = 2 << 30
    cpu_dtype: str = "auto"  # auto | float32 | keep: deployments/llm/dtype_policy.py
    cpu_upcast_max_bytes: int = 4 << 30
    max_n: int = 8  # choices one request may ask for
    # The prompt cache's disk tier (deployments/llm/disk_cache.py): None or 0 bytes turns it off.
    disk_cache_dir: Optional[str] = None  # <cache_dir>/prompt-cache, shared by the node's replicas
    disk_cache_bytes: int = 4 << 30
    disk_cache_min_tokens: int = 256
    speculative: Optional[SpeculativeSettings] = None  # speculative decoding; None: off
    gang: Optional[Membership] = None  # this engine's rank of a sharded replica; None: the whole model


@dataclass
class Guided:
    """A constrained request: one token mask per choice (a matcher's state is its sequence's),
    and whether its tool calls are the answer's JSON (a model without a tool-call syntax of its
    own: deployments/llm/constraints.py)."""

    masks: list[TokenMask]
    json_calls: bool = False
    grammar: str = ""  # what the masks enforce (a sharded replica's other ranks compile it again)

    @classmethod
    def of(cls, plan: Plan, masks: list[TokenMask]) -> Guided:
        return cls(masks, plan.json_calls, plan.grammar)


@dataclass(eq=False)
class _Request(Message):
    """One request inside the engine: the inbox message and its n sequences (choices)."""

    prompt: Prompt
    params: SamplingParams
    tools: Optional[list[dict[str, Any]]]
    n: int = 1
    logprobs: Optional[int] = None  # alternatives per token's log-probability; None: none asked for
    guided: Optional[Guided] = None
    cached_tokens: int = 0  # prompt tokens whose prefill the prefix cache saved
    admitted_at: float = 0.0  # when it joined the batch: its prefill time is measured from here
    keep_at_ends: list[str] = field(default_factory=list)  # see PrefixCache
    # The system prompt's tokens while this request prefills them for the prefix cache: others
    # that start with them wait for its cache rather than prefill them again (_park).
    shares_system: Optional[tuple] = None  # _system_key
    # Choices 1..n-1 until the first has prefilled all of the prompt but its last token, and
    # how many of the first's segment ends that takes (see _share_point).
    waiting: list[_Sequence] = field(default_factory=list)
    ends_to_share: int = 0
    running: int = 0  # choices started and not finished
    completion_tokens: int = 0
    # The engine thread's own record of `cancelled` (which the event loop may set at any time):
    # set between rounds, so every decision of a round sees one answer (and, on a sharded
    # replica, every rank the same one).
    abandoned: bool = False
    rid: int = 0  # its number in this engine, the same on every rank of a sharded replica
    adapter: Optional[AdapterRef] = None  # its LoRA adapter (deployments/llm/lora.py); None: the base model

    @property
    def namespace(self) -> str:
        """The prompt cache's namespace of its adapter ("": the base model's)."""
        return self.adapter.namespace if self.adapter is not None else ""

    def arrival(self) -> _Arrival:
        """What another rank needs to run this request as rank 0 runs it."""
        guided = self.guided
        return _Arrival(
            self.rid,
            self.prompt,
            self.params,
            self.tools,
            self.n,
            guided.grammar if guided else None,
            bool(guided and guided.json_calls),
        )


@dataclass
class _Arrival:
    rid: int
    prompt: Prompt
    params: SamplingParams
    tools: Optional[list[dict[str, Any]]]
    n: int
    grammar: Optional[str]
    json_calls: bool


@dataclass
class _Round:
    """What one round of the loop starts with: requests that arrived, the numbers of those
    abandoned since, and whether the engine stops. A sharded replica's rank 0 shares it."""

    arrivals: list[_Request] = field(default_factory=list)
    abandoned: list[int] = field(default_factory=list)
    stop: bool = False


@dataclass(eq=False)
class _Sequence:
    """One choice's decoding state."""

    request: _Request
    index: int
    mask: Optional[TokenMask] = None  # this choice's own matcher, under a constraint
    held: str = ""  # a constrained answer that is tool calls: its JSON, until it is complete
    uid: Optional[int] = None
    parser: Optional[OutputParser] = None
    detokenizer: Any = None
    completion_tokens: int = 0
    made_tool_call: bool = False
    pending_logprobs: list[TokenLogprob] = field(default_factory=list)  # not sent yet

    @property
    def prompt(self) -> Prompt:
        return self.request.prompt

    @property
    def params(self) -> SamplingParams:
        return self.request.params

    @property
    def tools(self) -> Optional[list[dict[str, Any]]]:
        return self.request.tools

    @property
    def json_calls(self) -> bool:
        return bool(self.request.guided and self.request.guided.json_calls)


# How a token left its sequence (see LLMEngine._on_token).
_RUNNING, _FINISHED, _STOPPED_BY_PARSER = object(), object(), object()


class LLMEngine(EngineThread[_Request]):
    """Owns one model. Create with `await LLMEngine.start(model_id, model_dir, config)`."""

    kind = "llm"

    def __init__(self, model_id: str, model_dir: Path, config: EngineConfig):
        super().__init__(model_id, model_dir)
        self.config = config
        self.tokenizer: Any = None
        self.context_length: Optional[int] = None
        self.generation_defaults: dict[str, Any] = {}
        self.prefix_cache: Optional[PrefixCache] = None
        self.token_bytes: Optional[TokenBytes] = None
        self.vocab_size: Optional[int] = None  # the width of the logits
        # LoRA adapters mixed in the batch (deployments/llm/lora.py), and the model's linear
        # layers they may adapt (path -> widths: adapters are checked against it off this thread).
        self.adapters: Optional[AdapterStage] = None
        self.linear_layers: dict[str, tuple[int, int]] = {}
        self._guides = GuideCache()
        self._channel: Optional[RoundChannel] = None  # a sharded replica's link to its other ranks
        self._rids = 0  # requests numbered as they arrive
        self.round_began: Optional[float] = None  # monotonic time the running round began (a gang's watchdog)
        # Written by the engine thread only; read for status and tests.
        self.stats = {
            "running": 0,
            "finished": 0,
            "aborted": 0,
            "generated_tokens": 0,
            "constrained_tokens": 0,  # tokens generated under a grammar's mask
            "mask_seconds": 0.0,  # spent computing those masks (wall time)
            "mask_cpu_seconds": 0.0,  # the grammar engine's own CPU time for them
        }

    # ------------------------------------------------------------------ asyncio side

    def resolve_max_tokens(self, prompt_len: int, requested: Optional[int], default: Optional[int] = None) -> int:
        """The tokens to generate: `requested`, else `default` (the route's), else the slot's
        default_max_tokens; a default is capped by the context, a request beyond it is a 400."""
        room = None if self.context_length is None else self.context_length - prompt_len
        if room is not None and room <= 0:
            raise invalid_request(
                f"The prompt has {prompt_len} tokens; this model's context length is {self.context_length} tokens.",
                "messages",
                "context_length_exceeded",
            )
        if requested is None:
            default = default or self.config.default_max_tokens
            return default if room is None else min(default, room)
        if room is not None and requested > room:
            raise invalid_request(
                f"This model's context length is {self.context_length} tokens; the prompt "
                f"uses {prompt_len} and max_tokens asks for {requested}.",
                "max_tokens",
                "context_length_exceeded",
            )
        return requested

    def sequence_counts(self) -> tuple[int, int]:
        """(running, queued): the sequences the decode batch holds, and those waiting for a
        place in it (beyond `max_batch_size` the batch generator keeps them unstarted) or still
        in the inbox. Read off the engine thread: a sample, not a transaction."""
        started = self.stats["running"]
        capacity = self.config.max_batch_size if self.config.batching else 1
        return min(started, capacity), max(0, started - capacity) + self.pending()

    def check_params(self, params: SamplingParams, n: int = 1) -> None:
        vocab = len(self.tokenizer)
        for token in params.logit_bias or {}:
            if not 0 <= token < vocab:
                raise invalid_request(f"logit_bias: token id {token} is not in [0, {vocab})", "logit_bias")
        if not 1 <= n <= self.config.max_n:
            raise invalid_request(f"n: this server generates 1 to {self.config.max_n} choices per request", "n")

    async def guide(self, constraint: Optional[Constraint], prompt: Prompt, n: int = 1) -> Optional[Guided]:
        """The token masks that hold each of `n` choices to `constraint` (None: nothing to
        enforce). Compiled off the engine thread, before the request joins the batch: a grammar
        that cannot be compiled is a 400 before any token, and never stalls the running batch."""
        if constraint is None:
            return None
        return await asyncio.to_thread(self._guided, constraint, prompt, n)

    def _guided(self, constraint: Constraint, prompt: Prompt, n: int) -> Optional[Guided]:
        guide = self._guides.get(self.tokenizer, self.vocab_size)
        plan = guide.plan(constraint, prompt.split_reasoning, self.tokenizer.decode(prompt.token_ids[-16:]))
        return None if plan is None else Guided.of(plan, guide.masks(plan.grammar, n))

    async def generate(
        self,
        prompt: Prompt,
        params: SamplingParams,
        tools: Optional[list[dict[str, Any]]] = None,
        n: int = 1,
        logprobs: Optional[int] = None,
        guided: Optional[Guided] = None,
        adapter: Optional[AdapterRef] = None,
    ) -> AsyncIterator[GenerationChunk]:
        """Stream the generation of `n` choices (chunks name theirs by `index`), with each
        token's log-probability and `logprobs` alternatives when that is not None, each choice
        held to its own mask of `guided` (from `guide`, for the same n), on the LoRA `adapter`
        (from `add_adapter`; None: the base model). Closing the iterator early removes every
        choice from the batch."""
        if guided is not None and len(guided.masks) != n:
            raise ValueError(f"{len(guided.masks)} token masks for {n} choices")
        request = _Request(prompt, params, tools, n, logprobs, guided, adapter=adapter)
        async for chunk in merged_chunks(self.stream(request, merge=merge_by_choice)):
            yield chunk

    @property
    def serves_adapters(self) -> bool:
        """LoRA adapters load into a whole model; a sharded replica's ranks hold shards of it."""
        return self.config.gang is None

    async def add_adapter(self, layout) -> AdapterRef:
        """Load an adapter (an AdapterLayout checked to fit `linear_layers`) into the running
        batch, between two of its steps."""
        return await self.submit(AdapterChange(layout=layout))

    def remove_adapter(self, ref: AdapterRef) -> None:
        """Unload an adapter between two steps, without waiting (its running rows finish on it
        first). Safe from any thread, and once the engine has stopped."""
        try:
            self._put(AdapterChange(remove=ref))
        except APIError:  # the engine is stopping: its adapters go with it
            pass

    # ------------------------------------------------------------------ engine thread

    def _serve(self) -> None:
        import mlx.core as mx

        self._loop(mx.default_stream(mx.default_device()))

    def _release(self) -> None:
        self._batch = None
        self._draft = None
        self.adapters = None
        if self.prefix_cache is not None:
            self.prefix_cache.close()  # what the writer holds is written before the arrays go
        self.prefix_cache = None
        if self._channel is not None and self._channel.doorbell is not None:
            self._channel.doorbell.close()
        super()._release()

    def _load(self) -> None:
        import mlx_lm

        from deployments.kernels import llm_norms

        t0 = time.perf_counter()
        gang = self.config.gang
        if gang is not None:
            doorbell = Doorbell(gang).open() if gang.doorbell else None  # rank 0 listens before the group forms
            try:
                group = join_group(gang)
                self._model, self.tokenizer, model_config = load_sharded(
                    self.model_dir, group, gang.spec, self.model_id
                )
                self._channel = RoundChannel(group, doorbell.connect() if doorbell else None)
            except BaseException:
                if doorbell is not None:  # a load that fails frees its port for the next gang
                    doorbell.close()
                raise
        else:
            self._model, self.tokenizer, model_config = mlx_lm.load(str(self.model_dir), return_config=True)
        self._apply_dtype_policy()
        self._install_cpu_attention()
        # On MLX's CPU backend a short step's host time is mostly op-by-op dispatch of the
        # norms' and RoPEs' fallback graphs: those run compiled (deployments/kernels/llm_norms.py).
        llm_norms.compile_served(self._model, warm=gang is None)
        self._load_speculation()
        self.adapters = AdapterStage(self._model)
        # A sharded model's layers are shards: adapters are served on whole models only.
        self.linear_layers = linear_layers(self._model) if gang is None else {}
        self.context_length = model_config.get("max_position_embeddings")
        self.vocab_size = (model_config.get("text_config") or model_config).get("vocab_size")
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
                self.model_id,
                self.config.prefix_cache_entries,
                self.config.prefix_cache_bytes,
                self._disk_tier(),
                disk_for=self._disk_tier,
            )
        self.token_bytes = TokenBytes(self.tokenizer)
        logger.info("Loaded %s from %s in %.1fs", self.model_id, self.model_dir, time.perf_counter() - t0)

    def _load_speculation(self) -> None:
        """Speculative decoding's needs, checked at load (a replica that cannot serve its
        setting fails to start, naming both): rejected drafted tokens are cut out of each row's
        KV cache, which takes a plain KV cache in every layer (not a sliding window's, nor a
        recurrent state), in the served model and the draft model; a draft model must share
        the served model's tokenizer."""
        import mlx_lm

        settings = self.config.speculative
        self._draft = None
        if settings is None:
            return
        _plain_kv_cache(self._model, self.model_id)
        if settings.method != "draft":
            return
        self._draft, draft_tokenizer = mlx_lm.load(settings.draft_model)
        _plain_kv_cache(self._draft, settings.draft_model)
        if draft_tokenizer.vocab_size != self.tokenizer.vocab_size or any(
            draft_tokenizer.encode(text) != self.tokenizer.encode(text) for text in _TOKENIZER_PROBES
        ):
            raise ValueError(
                f"llm.speculative.draft_model: {settings.draft_model} does not share {self.model_id}'s tokenizer"
            )
        from deployments.kernels import llm_norms
        from deployments.llm import dtype_policy

        weights = dtype_policy.inspect_weights(self._draft)
        decision = dtype_policy.decide(
            self.config.cpu_dtype, dtype_policy.on_cpu_backend(), weights, self.config.cpu_upcast_max_bytes
        )
        if decision.upcast:
            dtype_policy.upcast(self._draft)
        llm_norms.compile_served(self._draft)

    def _disk_tier(self, namespace: str = "") -> Optional[DiskCache]:
        """The prompt cache's disk tier for this model as loaded (its key names the files, the
        dtype served and the chat template; an adapter's also its `namespace`), or None when it
        is not configured."""
        config = self.config
        if not config.disk_cache_dir or config.disk_cache_bytes <= 0:
            return None
        if config.gang is not None:
            # Each rank holds its own shard of a prompt's KV, and a load on one rank alone
            # would set the ranks apart: a sharded replica keeps its prompt cache in RAM only.
            return None
        from importlib.metadata import version

        key = model_key(
            self.model_id,
            self.model_dir,
            str(self.stats.get("weights")),
            getattr(self.tokenizer, "chat_template", None),
            extra=f"mlx-lm {version('mlx-lm')}{' ' + namespace if namespace else ''}",
        )
        return DiskCache(
            Path(config.disk_cache_dir),
            key,
            config.disk_cache_bytes,
            config.disk_cache_min_tokens,
            save=save_cache,
            load=load_cache,
        )

    def batch_totals(self):
        """What the batch has done since the engine started: prompt and generated tokens,
        decode steps, their time (deployments/llm/batch.py BatchStats). A sample, read off
        the engine thread."""
        from deployments.llm.batch import BatchStats

        batch = getattr(self, "_batch", None)
        return BatchStats(**vars(batch.totals)) if batch is not None else BatchStats()

    def prompt_cache_tiers(self) -> dict[str, Any]:
        """The prompt cache per tier (RAM, disk): entries, bytes, hits; {} when it is off."""
        cache = self.prefix_cache
        return cache.tiers() if cache is not None else {}

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

    @staticmethod
    def _install_cpu_attention() -> None:
        """Prefill attention through numpy on MLX's CPU backend (deployments/kernels/
        llm_attention.py: ~85 % of a 2.3k-token prefill was MLX's CPU `exp`); not on Metal."""
        from deployments.kernels import llm_attention
        from deployments.kernels.conv import enabled_kernels

        if "llm_attention" in enabled_kernels():
            llm_attention.install()

    def _new_batch(self, stream):
        from deployments.llm.batch import Batch

        size = self.config.max_batch_size if self.config.batching else 1
        prefill = self.config.prefill_batch_size if self.config.batching else 1
        return Batch(
            self._model,
            capacity=size,
            prefill_batch=min(prefill, size),
            prefill_step=prefill_step(self.config.prefill_step_size),
            stream=stream,
            mask_width=self.vocab_size,
            drafter=self._drafter(),
            followers=self._channel,
            adapters=self.adapters,
        )

    def _drafter(self):
        """Speculative decoding's draft stage for a new batch (its state is the batch's), or None."""
        settings = self.config.speculative
        if settings is None:
            return None
        if settings.method == "draft":
            from deployments.llm.draft_model import DraftModelDrafter

            return DraftModelDrafter(
                self._draft,
                settings.num_speculative_tokens,
                prefill_step(self.config.prefill_step_size),
                settings.max_batch,
            )
        from deployments.llm.drafts import NgramDrafter

        return NgramDrafter(settings)

    def _loop(self, stream) -> None:
        self._batch = self._new_batch(stream)
        active: dict[int, _Sequence] = {}
        # A system prompt being prefilled -> the sequence prefilling it, and the requests that
        # start with it, parked until its cache is kept (_park).
        self._prefilling: dict[tuple, int] = {}
        self._parked: dict[tuple, list[_Request]] = {}
        try:
            while True:
                with self.replies_batched():
                    if not self._round(active, stream):
                        return
        except BaseException as e:
            # A sharded replica's failed round (a rank gone): whoever waits hears it, and the
            # thread ends (its replica's health check then fails).
            error = APIError(503, f"The model's engine stopped: {type(e).__name__}: {e}", "service_unavailable")
            for request in self._in_flight(active):
                self._fail(request, error)
            raise

    def _round(self, active: dict[int, _Sequence], stream) -> bool:
        """Admit and drop requests, run one batch step, hand each token to its sequence.
        False when the engine must stop."""
        self.round_began = None  # waiting for work is no round
        if not self._take_inbox(active, block=not active):
            return False
        if self.adapters.retiring:
            self.adapters.sweep(self._adapter_slots(active))
        self._unpark_orphans(active)
        if not active:
            return True
        self.round_began = time.monotonic()
        stepped = self._step(active, stream)
        if stepped is not None:
            self._deliver(active, *stepped)
        return True

    def _step(self, active: dict[int, _Sequence], stream) -> Optional[tuple[list, dict]]:
        """One batch step: its token events and their log-probabilities. A step that fails
        fails every sequence and the batch starts afresh (never the replica)."""
        try:
            prompt_events, token_events = self._batch.next()
            self._at_segment_ends(active, prompt_events)
            return token_events, self._logprobs(active, token_events)
        except Exception as e:
            if self._channel is not None:
                # One rank's failed step sets the ranks apart: the gang cannot go on. The thread
                # ends (its replica's health check says so) and Serve replaces the whole gang.
                raise
            logger.exception("Batch step failed; failing %d sequences", len(active))
            for request in {seq.request for seq in active.values()}:
                self._fail(request, server_error(f"Generation failed: {e}"))
            active.clear()
            self._batch = self._new_batch(stream)
            return None

    def _deliver(self, active: dict[int, _Sequence], events: list, logprobs: dict) -> None:
        """Each token to its sequence; a finished one leaves, its cache kept for later prompts."""
        stopped_by_us: dict[int, str] = {}  # uid -> its prompt cache namespace
        for i, r in enumerate(events):
            seq = active.get(r.uid)
            if seq is None:
                continue
            outcome = self._on_token(seq, r.token, r.finish_reason, logprobs.get(i))
            if outcome is not _RUNNING:
                del active[r.uid]
                self.stats["finished"] += 1
            if outcome is _FINISHED:
                self._keep_cache(r.all_tokens, r.prompt_cache, ANSWER, seq.request.namespace)
            elif outcome is _STOPPED_BY_PARSER:
                # The batch drops the sequences it finishes; these it cannot know of.
                stopped_by_us[r.uid] = seq.request.namespace
        if stopped_by_us:
            caches = self._batch.remove(list(stopped_by_us), return_prompt_caches=self.prefix_cache is not None)
            for uid, (cache, tokens) in caches.items():
                self._keep_cache(tokens, cache, ANSWER, stopped_by_us[uid])
        self.stats["running"] = len(active)
        self.stats["generated_tokens"] += len(events)

    def _take_inbox(self, active: dict[int, _Sequence], block: bool) -> bool:
        """Admit new requests and drop abandoned ones. False when the engine must stop."""
        round_ = self._next_round(active, block)
        if round_.stop:
            parked = [r for waiting in self._parked.values() for r in waiting]
            for running in {seq.request for seq in active.values()} | set(parked):
                self._fail(running, unloaded(self.model_id))
            return False
        if round_.abandoned:
            live = {r.rid: r for r in self._in_flight(active)}
            for rid in round_.abandoned:
                live[rid].abandoned = True
        for request in round_.arrivals:
            if not self._park(request):
                self._start(request, active)
        self._drop_abandoned(active)
        return True

    def _next_round(self, active: dict[int, _Sequence], block: bool) -> _Round:
        """The inbox's news since the last round (waiting for some when `block`); on a sharded
        replica, shared by rank 0 and replayed by the other ranks."""
        if self._channel is not None and not self._channel.leads:
            return self._replay(self._channel.share(wake=block))
        round_ = _Round()
        waited = block  # the other ranks, with the same empty batch, sleep on the doorbell
        while True:
            if not block and self._inbox.empty():  # a busy engine's usual round: no raise and catch
                break
            try:
                request = self._inbox.get(timeout=0.5) if block else self._inbox.get_nowait()
            except queue.Empty:
                break
            block = False
            if request is STOP:
                round_.stop = True
                break
            if isinstance(request, AdapterChange):
                self._change_adapter(request, active)
                continue
            if request.cancelled:  # abandoned before it started
                continue
            self._rids += 1
            request.rid = self._rids
            round_.arrivals.append(request)
        round_.abandoned = [r.rid for r in self._in_flight(active) if r.cancelled and not r.abandoned]
        if self._channel is not None:
            self.round_began = time.monotonic()  # the share waits for every rank
            news = round_.stop or round_.arrivals or round_.abandoned
            # A round with no news (most of a busy gang's: each decode step is one) shares only
            # its size, 0: one small collective instead of two.
            self._channel.share(
                (round_.stop, [r.arrival() for r in round_.arrivals], round_.abandoned) if news else None,
                wake=waited,
            )
        return round_

    def _replay(self, shared) -> _Round:
        """Rank 0's round on another rank: its requests rebuilt, answering nowhere."""
        if shared is None:
            return _Round()
        stop, arrivals, abandoned = shared
        requests = []
        for a in arrivals:
            guided = None
            if a.grammar is not None:
                masks = self._guides.get(self.tokenizer, self.vocab_size).masks(a.grammar, a.n)
                guided = Guided(masks, a.json_calls, a.grammar)
            request = _Request(a.prompt, a.params, a.tools, a.n, None, guided)
            request.rid = a.rid
            self.answer_nowhere(request)
            requests.append(request)
        return _Round(requests, abandoned, stop)

    def _in_flight(self, active: dict[int, _Sequence]) -> list[_Request]:
        """The requests running or parked, in a fixed order (the same on every rank)."""
        seen = {}
        for seq in active.values():
            seen.setdefault(seq.request.rid, seq.request)
        for waiting in self._parked.values():
            for request in waiting:
                seen.setdefault(request.rid, request)
        return list(seen.values())

    def _change_adapter(self, change: AdapterChange, active: dict[int, _Sequence]) -> None:
        try:
            result = self.adapters.apply(change, self._adapter_slots(active))
        except Exception as e:
            logger.exception("Could not change adapters")
            if change._reply is not None:
                self._fail(change, e)
            return
        if change._reply is not None:
            self._finish(change, result)

    def _adapter_slots(self, active: dict[int, _Sequence]) -> set[int]:
        """The adapter slots of the running and parked requests."""
        requests = [seq.request for seq in active.values()] + [r for rs in self._parked.values() for r in rs]
        return {r.adapter.slot for r in requests if r.adapter is not None}

    def _start(self, request: _Request, active: dict[int, _Sequence]) -> None:
        try:
            started = self._admit(request)
        except APIError as e:
            self._fail(request, e)
            return
        except Exception as e:
            logger.exception("Could not start a sequence")
            self._fail(request, server_error(f"Could not start generation: {e}"))
            return
        active.update((seq.uid, seq) for seq in started)
        self.stats["running"] = len(active)
        first = started[0] if started else None
        if first is not None and request.keep_at_ends[:1] == [SYSTEM]:
            request.shares_system = _system_key(request)
            self._prefilling[request.shares_system] = first.uid

    def _park(self, request: _Request) -> bool:
        """Hold a request whose system prompt another sequence is prefilling right now: once
        that cache is kept, this one starts from it instead of prefilling the same tokens beside
        it (a burst of conversations on one system prompt prefills it once; with 512-token steps
        the rest of a burst otherwise joins before the first has reached its system prompt's
        end)."""
        end = request.prompt.system_end
        if self.prefix_cache is None or end <= 0:
            return False
        key = _system_key(request)
        if key not in self._prefilling:
            return False
        self._parked.setdefault(key, []).append(request)
        return True

    def _unpark(self, key: tuple, active: dict[int, _Sequence]) -> None:
        self._prefilling.pop(key, None)
        for request in self._parked.pop(key, []):
            if request.abandoned:
                continue
            if not self._park(request):  # a new owner may have started for this prompt
                self._start(request, active)

    def _unpark_orphans(self, active: dict[int, _Sequence]) -> None:
        """Parked requests whose owner left the batch (cancelled, failed, finished) before its
        system prompt's end start on their own (the first of them becomes the new owner)."""
        for key, uid in list(self._prefilling.items()):
            if uid not in active:
                self._unpark(key, active)

    def _drop_abandoned(self, active: dict[int, _Sequence]) -> None:
        """Sequences whose client went away leave the batch before the next step."""
        gone = [uid for uid, seq in active.items() if seq.request.abandoned]
        if not gone:
            return
        self._batch.remove(gone)
        for uid in gone:
            del active[uid]
        self.stats["aborted"] += len(gone)
        self.stats["running"] = len(active)

    def _admit(self, request: _Request) -> list[_Sequence]:
        """Put a request's sequences in the batch: all n at once when only the prompt's last
        token is left to run, else the first alone and the others once it has prefilled."""
        if request.adapter is not None:
            self.adapters.check(request.adapter)
        plan = self._plan_prefill(request.prompt, request.namespace)
        request.cached_tokens, request.keep_at_ends = plan.cached, plan.keep_at_ends
        request.admitted_at = time.perf_counter()
        masks = request.guided.masks if request.guided else [None] * request.n
        choices = [_Sequence(request, i, mask) for i, mask in enumerate(masks)]
        request.ends_to_share = _share_point(plan.segments)
        if request.n == 1 or request.ends_to_share > 0:
            self._insert(choices[0], plan.segments, plan.cache, request.prompt.token_ids[: plan.cached])
            request.waiting = choices[1:]
            return choices[:1]
        before_last = request.prompt.token_ids[:-1]
        try:
            for seq in choices:  # the planned cache already holds all of the prompt but its last token
                cache = copy.deepcopy(plan.cache) if seq.index and plan.cache is not None else plan.cache
                self._insert(seq, [request.prompt.token_ids[-1:]], cache, before_last)
        except Exception:  # none of a failed request's choices may run on unseen
            self._batch.remove([seq.uid for seq in choices if seq.uid is not None])
            raise
        return choices

    def _insert(self, seq: _Sequence, segments: list[list[int]], cache: Optional[list[Any]], done: list[int]) -> None:
        """One sequence into the batch: `segments` still to prefill after `done`, whose KV
        `cache` it starts from (None: a fresh one)."""
        tok = self.tokenizer
        think = (tok.think_start, tok.think_end) if tok.has_thinking and seq.prompt.split_reasoning else None
        tool_call = (
            (tok.tool_call_start, tok.tool_call_end)
            if tok.has_tool_calling and seq.tools and tok.tool_call_end and not seq.json_calls
            else None
        )
        seq.parser = OutputParser(
            stop=seq.params.stop, think=think, tool_call=tool_call, initial_state=seq.prompt.initial_state
        )
        seq.detokenizer = tok.detokenizer
        processors = _make_logits_processors(seq.params)
        # A grammar's end is an end-of-sequence token: it ends the answer even under ignore_eos.
        eos = [] if seq.params.ignore_eos and not seq.mask else [(t,) for t in tok.eos_token_ids]
        if seq.params.min_tokens and eos:
            processors.append(
                _min_tokens_processor(seq.params.min_tokens, tok.eos_token_ids, len(seq.prompt.token_ids))
            )
        seq.uid = self._batch.insert(
            Sequence(
                segments,
                seq.params.max_tokens,
                RowSampler.of(seq.params, seq.index),
                cache=cache,
                done=list(done),
                processors=tuple(processors),
                stop_tokens=eos,
                mask=seq.mask,
                logprobs=seq.request.logprobs is not None,
                adapter=seq.request.adapter.slot if seq.request.adapter is not None else 0,
            )
        )
        seq.request.running += 1

    def _plan_prefill(self, prompt: Prompt, namespace: str = "") -> PrefillPlan:
        if self.prefix_cache is None:
            return PrefillPlan(None, 0, [prompt.token_ids])
        return self.prefix_cache.plan(prompt.token_ids, prompt.system_end, namespace)

    def _at_segment_ends(self, active: dict[int, _Sequence], prompt_responses: list) -> None:
        """Where a prompt's prefill reaches a segment end: keep the cache so far for later
        prompts, and start a request's other choices from it once it holds all of the prompt
        but the last token."""
        ends = [r.uid for r in prompt_responses if r.end_of_segment and not r.end_of_prompt and r.uid in active]
        keep = [uid for uid in ends if active[uid].request.keep_at_ends]
        if keep and self.prefix_cache is not None:
            self._keep_prompt_caches(active, keep)
        for uid in ends:
            request = active[uid].request
            if request.shares_system is not None:  # its first end: the system prompt's, now kept
                key, request.shares_system = request.shares_system, None
                self._unpark(key, active)
            if request.waiting:
                request.ends_to_share -= 1
                if request.ends_to_share == 0:
                    self._start_waiting(active, active[uid])

    def _keep_prompt_caches(self, active: dict[int, _Sequence], uids: list[int]) -> None:
        try:
            caches = self._batch.extract_cache(uids)
        except Exception:  # as in _keep_cache: a lost optimisation, not a failed batch
            logger.exception("Could not extract prompt caches; the prefix cache is turned off")
            self.prefix_cache = None
            return
        for uid, (cache, tokens) in caches.items():
            request = active[uid].request
            self._keep_cache(tokens, cache, request.keep_at_ends.pop(0), request.namespace)

    def _start_waiting(self, active: dict[int, _Sequence], first: _Sequence) -> None:
        """The other choices of `first`'s request join the batch, each from its own copy of
        the KV cache `first` has built (all of the prompt but its last token)."""
        request, prompt = first.request, first.prompt.token_ids
        waiting, request.waiting = request.waiting, []
        for seq in waiting:
            try:
                cache, done = self._batch.extract_cache([first.uid])[first.uid]
                segments = [prompt[-1:]]
            except Exception:  # only a saving: this choice prefills the prompt itself
                logger.exception("Could not copy a prompt cache; a choice prefills its prompt again")
                cache, done, segments = None, [], [prompt]
            self._insert(seq, segments, cache, done)
            active[seq.uid] = seq

    def _keep_cache(
        self, tokens: Optional[list[int]], cache: Optional[list[Any]], kind: str, namespace: str = ""
    ) -> None:
        if self.prefix_cache is None or not tokens or cache is None:
            return
        try:
            self.prefix_cache.keep(tokens, cache, kind, namespace)
            # What the running batch holds counts against the same budget (as mlx_lm.server does).
            self.prefix_cache.trim_to(self.config.prefix_cache_bytes - self._batch.prompt_cache_nbytes)
        except Exception:  # the cache only saves time: never fail the running batch for it
            logger.exception("Could not keep a prompt cache; the prefix cache is turned off")
            self.prefix_cache = None

    def _logprobs(self, active: dict[int, _Sequence], responses: list) -> dict[int, TokenLogprob]:
        """Index of an event in `responses` -> the entry of its token, for the sequences that
        asked (a sequence may have several tokens in a step, with speculative decoding): the
        chosen token's log-probability and the top k, out of the row its sampler saw, in one
        pass over the rows of this step."""
        import mlx.core as mx

        wanted = [
            (i, r, active[r.uid].request.logprobs)
            for i, r in enumerate(responses)
            if r.uid in active and active[r.uid].request.logprobs is not None and r.logprobs is not None
        ]
        if not wanted:
            return {}
        rows = mx.stack([r.logprobs for _, r, _ in wanted]).astype(mx.float32)
        chosen = mx.take_along_axis(rows, mx.array([[r.token] for _, r, _ in wanted]), axis=-1)[:, 0]
        k = min(max(keep for _, _, keep in wanted), rows.shape[-1])
        if k > 0:
            top_ids = mx.argpartition(-rows, kth=k - 1, axis=-1)[:, :k]
            top_values = mx.take_along_axis(rows, top_ids, axis=-1)
            mx.eval(chosen, top_ids, top_values)
            # A token a constraint masked (-inf) could never have been sampled: no alternative.
            tops = [
                [(i, v) for i, v in zip(ids, values) if v > -math.inf]
                for ids, values in zip(top_ids.tolist(), top_values.tolist())
            ]
        else:
            mx.eval(chosen)
            tops = [[] for _ in wanted]
        return {
            i: entry(self.token_bytes, r.token, value, top, keep)
            for (i, r, keep), value, top in zip(wanted, chosen.tolist(), tops)
        }

    def _on_token(
        self, seq: _Sequence, token: int, finish_reason: Optional[str], logprob: Optional[TokenLogprob] = None
    ) -> object:
        """Feed one generated token to its sequence; say whether and how it ended."""
        seq.completion_tokens += 1
        if seq.completion_tokens == 1 and seq.index == 0 and self.prefix_cache is not None:
            request = seq.request
            prefilled = len(request.prompt.token_ids) - request.cached_tokens
            self.prefix_cache.prefilled(prefilled, time.perf_counter() - request.admitted_at)
        if seq.mask and seq.mask.error:
            return self._left_grammar(seq, finish_reason)
        detok = seq.detokenizer
        if finish_reason != "stop":  # an end-of-sequence token is not text
            detok.add_token(token)
            if logprob is not None:
                seq.pending_logprobs.append(logprob)
        if finish_reason is not None:
            detok.finalize()
        parsed = seq.parser.feed(detok.last_segment)
        if parsed.stopped:
            finish_reason = "stop"
        if finish_reason is None:
            if parsed.content or parsed.reasoning or parsed.tool_texts:  # else the text is held back
                chunk = self._chunk(seq, parsed)
                if not chunk.is_empty():
                    self._send(seq.request, self._with_logprobs(seq, chunk))
            return _RUNNING
        tail = seq.parser.finish()
        merged = ParsedText(
            content=parsed.content + tail.content,
            reasoning=parsed.reasoning + tail.reasoning,
            tool_texts=parsed.tool_texts + tail.tool_texts,
        )
        chunk = self._chunk(seq, merged, final=True)
        chunk.stop_sequence = seq.parser.stopped_by  # Anthropic's stop_sequence names it
        if finish_reason == "stop" and seq.made_tool_call:
            finish_reason = "tool_calls"
        chunk.finish_reason = finish_reason
        self._end_choice(seq, self._with_logprobs(seq, chunk))
        return _STOPPED_BY_PARSER if parsed.stopped else _FINISHED

    def _left_grammar(self, seq: _Sequence, finish_reason: Optional[str]) -> object:
        """Only a bypassed mask gets here: the answer would not follow the constraint, so the
        request fails, and its other choices leave the batch at the next step."""
        logger.error("A constrained sequence left its grammar: %s", seq.mask.error)
        self._count_mask(seq)
        self._fail(seq.request, server_error(f"Constrained generation failed: {seq.mask.error}"))
        seq.request.abandoned = True
        return _FINISHED if finish_reason is not None else _STOPPED_BY_PARSER

    def _count_mask(self, seq: _Sequence) -> None:
        if seq.mask:
            self.stats["constrained_tokens"] += seq.mask.steps
            self.stats["mask_seconds"] += seq.mask.seconds
            self.stats["mask_cpu_seconds"] += seq.mask.cpu_seconds

    def _end_choice(self, seq: _Sequence, chunk: GenerationChunk) -> None:
        """A choice's last chunk; the request's last one also carries the usage of all choices
        (the prompt counted once) and ends the stream."""
        self._count_mask(seq)
        request = seq.request
        request.running -= 1
        request.completion_tokens += seq.completion_tokens
        if request.running == 0 and not request.waiting:
            prompt_tokens = len(request.prompt.token_ids)
            chunk.usage = UsageInfo(
                prompt_tokens=prompt_tokens,
                completion_tokens=request.completion_tokens,
                total_tokens=prompt_tokens + request.completion_tokens,
                prompt_tokens_details=PromptTokensDetails(cached_tokens=request.cached_tokens),
            )
            self._send(request, chunk)
            self._finish(request)
        else:
            self._send(request, chunk)

    def _chunk(self, seq: _Sequence, parsed: ParsedText, final: bool = False) -> GenerationChunk:
        if seq.json_calls:
            # The answer is the calls' JSON: held back, and sent as tool calls once complete.
            seq.held += parsed.content
            parsed = ParsedText(reasoning=parsed.reasoning, tool_texts=[seq.held] if final else [])
            parser = parse_json_calls
        else:
            parser = self.tokenizer.tool_parser
        chunk = GenerationChunk(index=seq.index, content=parsed.content, reasoning_content=parsed.reasoning)
        if parsed.tool_texts:
            calls, failed = parse_tool_calls(parsed.tool_texts, parser, seq.tools)
            chunk.tool_calls = calls
            seq.made_tool_call = seq.made_tool_call or bool(calls)
            # A call the parser could not read goes back to the client as text, not into a void
            # (a constrained call cut short by max_tokens, say).
            for text in failed:
                if parser is parse_json_calls:
                    chunk.content += text
                else:
                    chunk.content += f"{self.tokenizer.tool_call_start}{text}{self.tokenizer.tool_call_end}"
        return chunk

    @staticmethod
    def _with_logprobs(seq: _Sequence, chunk: GenerationChunk) -> GenerationChunk:
        """A chunk that goes out carries the entries of the tokens its text came from (a token
        whose text is held back, as a possible stop string, waits for the next chunk)."""
        if seq.request.logprobs is not None:
            chunk.logprobs, seq.pending_logprobs = seq.pending_logprobs, []
        return chunk


# Texts whose tokens a draft model's tokenizer must give as the served model's does.
_TOKENIZER_PROBES = ("Hello, world!", "def f(x):\n    return x ** 2  # square", "Ünïcödé 日本語 🤗", "<|im_end|>")


def _plain_kv_cache(model: Any, name: str) -> None:
    from mlx_lm.models.cache import KVCache, make_prompt_cache

    kinds = {type(c).__name__ for c in make_prompt_cache(model) if type(c) is not KVCache}
    if kinds:
        raise ValueError(
            f"llm.speculative: {name} keeps {', '.join(sorted(kinds))} caches, from which rejected "
            "drafted tokens cannot be removed; speculative decoding needs a plain KV cache"
        )


# Prompt tokens per prefill step when the config names none. On MLX's CPU backend a prefill's
# cost grows with the step (a step's attention scores and the activations it carries fall out of
# the caches): a 2347-token prompt of the benchmark Qwen3 prefilled in 11.8 s at 2048, 8.3 at 512,
# 7.9 at 256 (MLX's attention), 5.8 / 5.1 / 5.2 with deployments/kernels/llm_attention.py; eight
# of them batched 71.6 s at 2048, 39.7 at 512, 38.3 at 256 (docs/performance.md, "A long
# prompt's prefill on MLX's CPU backend").
# On Metal mlx-lm's own default.
CPU_PREFILL_STEP = 512
METAL_PREFILL_STEP = 2048


def prefill_step(configured: Optional[int]) -> int:
    if configured:
        return configured
    from deployments.llm.dtype_policy import on_cpu_backend

    return CPU_PREFILL_STEP if on_cpu_backend() else METAL_PREFILL_STEP


def _system_key(request: _Request) -> tuple:
    """What requests that share a system prompt's prefill share: its tokens, on one adapter."""
    return (request.namespace, *request.prompt.token_ids[: request.prompt.system_end])


def _share_point(segments: list[list[int]]) -> int:
    """How many segment ends a sequence inserted with `segments` reaches before its KV cache
    holds all of its prompt but the last token (BatchGenerator splits that token off into a
    segment of its own when the last segment is longer): 0 when only that token is left."""
    segments = [s for s in segments if s]
    if not segments:
        return 0
    return len(segments) if len(segments[-1]) > 1 else len(segments) - 1


def _min_tokens_processor(min_tokens: int, eos_ids: Any, prompt_tokens: int):
    """`min_tokens` as a logits processor: end-of-sequence tokens get -inf while fewer than
    `min_tokens` tokens follow the prompt (read off the context's length, so that a drafted
    position is judged as it would be when decoded), unless nothing else is left (a grammar
    that allows only its end: it ends, rather than sampling from nothing)."""
    import mlx.core as mx

    banned = {}

    def apply(tokens, logits):
        if len(tokens) - prompt_tokens >= min_tokens:
            return logits
        width = logits.shape[-1]
        if width not in banned:
            banned[width] = mx.array(np.isin(np.arange(width), list(eos_ids)))
        held = mx.where(banned[width], mx.array(-float("inf"), dtype=logits.dtype), logits)
        return mx.where(mx.max(held, axis=-1, keepdims=True) > -float("inf"), held, logits)

    return apply


def _make_logits_processors(params: SamplingParams) -> list:
    from mlx_lm.sample_utils import make_logits_processors

    return make_logits_processors(
        params.logit_bias,
        params.repetition_penalty,
        presence_penalty=params.presence_penalty,
        frequency_penalty=params.frequency_penalty,
    )
