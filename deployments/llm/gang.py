"""A sharded LLM replica's ranks: one model split over several processes (tensor parallel: each
rank holds a slice of every layer; pipeline parallel: each rank holds some of the layers), all
of them running the same engine loop in lockstep.

Rank 0 is the Serve replica: it takes the requests. Every round of its engine loop it shares
what the round brings (requests that arrived, requests abandoned, the stop) with the other
ranks (`RoundChannel.share`), and every decode step it shares its picks (`RoundChannel.picks`:
an all-sum to which the others add zeros, inside the step's graph, so it costs no extra wait).
Everything else the engine decides (admission, parking, the prompt cache's RAM tier, grammar
masks, stop strings) is a deterministic function of those, so every rank runs the same
forward passes with the same shapes, as MLX's collectives require. This is mlx_lm.server's
scheme under `mlx.launch` (it shares each request with pickle over an all-sum), with the picks
shared instead of a shared random seed: a grammar mask or a seeded sampler then needs to be
right on rank 0 only.

Before a shared round that follows an idle spell rank 0 rings a `Doorbell` (one byte over a
plain TCP socket) and the other ranks wait for it there, asleep: MLX's ring collective polls
while it waits, which on an idle gang kept each follower at about 80 % of a core
(docs/multi-node.md). An idle follower whose rank 0 is gone hears it as the socket's end and
stops, rather than waiting for ever.

MLX's distributed backends: `ring` (TCP; the hostfile is built from the ranks' addresses, no
file for the user to write), `jaccl` (Thunderbolt 5 RDMA between Macs) and `mpi`. mlx-lm
shards the models (`model.shard(group)`, `model.model.pipeline(group)`); a model that supports
neither, or sizes its heads or layers do not divide, is refused at load with the model and the
setting named.

MLX is imported where it is used; no Ray (deployments/llm/gang_actor.py places the ranks).
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

BACKENDS = ("ring", "jaccl", "mpi")


@dataclass(frozen=True)
class GangSpec:
    """How one replica's model is split, and over which MLX backend its ranks talk."""

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    backend: str = "ring"

    @property
    def size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def sharded(self) -> bool:
        return self.size > 1


@dataclass(frozen=True)
class Membership:
    """One rank's place in its gang: what the engine thread needs to join the group."""

    spec: GangSpec
    rank: int
    hostfile: str  # the ring backend's hostfile (JSON); "" for the others
    doorbell: str = ""  # rank 0's "ip:port" for the doorbell; "" waits in the collective
    # Rank 0's: set once the group has formed (the start's watchdog, deployments/llm/ranks.py).
    joined: Optional[threading.Event] = field(default=None, compare=False)


def ring_hostfile(addresses: list[tuple[str, int]]) -> str:
    """The ring backend's hostfile for ranks at `addresses` (rank order): one list of
    "ip:port" per rank, as mlx.launch writes it."""
    return json.dumps([[f"{ip}:{port}"] for ip, port in addresses])


def join_group(membership: Membership):
    """This process's MLX distributed group, as rank `membership.rank`. Blocks until every rank
    has joined (the ring backend connects to its neighbours)."""
    import mlx.core as mx

    path = None
    if membership.spec.backend == "ring":
        fd, path = tempfile.mkstemp(prefix="ominix-ring-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            f.write(membership.hostfile)
        os.environ["MLX_HOSTFILE"] = path
    os.environ["MLX_RANK"] = str(membership.rank)
    try:
        group = mx.distributed.init(strict=True, backend=membership.spec.backend)
    finally:
        if path is not None:  # read by init; a replaced gang writes a new one
            os.unlink(path)
    if group.size() != membership.spec.size:
        raise RuntimeError(f"the {membership.spec.backend} group has {group.size()} ranks, not {membership.spec.size}")
    if membership.joined is not None:
        membership.joined.set()
    return group


# What a rank > 0 reports of its start (deployments/llm/ranks.py `Rank.phase`).
PLACED, RESOLVING, JOINING = "placed", "resolving", "joining"


class StartWatch:
    """Whether a gang's start has hung, from its other ranks' phases, before the group forms.

    MLX's ring init waits for ever for a rank that never connects. A rank still fetching its
    model files (RESOLVING) may take as long as the download does; a rank that never began
    (PLACED, or not answering: None) past `timeout_s`, or every rank JOINING for `timeout_s`
    without the group forming, is a hung start: the replica fails and Serve starts a new gang."""

    def __init__(self, timeout_s: float, now: float):
        self.timeout_s = timeout_s
        self.began = now
        self.all_joining_since: Optional[float] = None

    def problem(self, phases: list[Optional[str]], now: float) -> Optional[str]:
        if phases and all(p == JOINING for p in phases):
            self.all_joining_since = self.all_joining_since if self.all_joining_since is not None else now
            if now - self.all_joining_since > self.timeout_s:
                return f"its ranks did not form their MLX group within {self.timeout_s:.0f} s"
            return None
        self.all_joining_since = None
        idle = [rank for rank, p in enumerate(phases, start=1) if p in (None, PLACED)]
        if idle and now - self.began > self.timeout_s:
            return f"rank {', '.join(map(str, idle))} did not begin within {self.timeout_s:.0f} s"
        return None


def check_shardable(model: Any, config: dict, spec: GangSpec, model_id: str) -> None:
    """Refuse a split the model cannot take, naming the model and the setting."""
    text = config.get("text_config") or config
    if spec.tensor_parallel_size > 1 and spec.pipeline_parallel_size > 1:
        raise ValueError(
            f"llm.tensor_parallel_size and llm.pipeline_parallel_size: {model_id} would need both at once, "
            "which takes sub-groups MLX's ring backend does not form; use one of them"
        )
    if spec.tensor_parallel_size > 1:
        tp = spec.tensor_parallel_size
        if not hasattr(model, "shard"):
            raise ValueError(f"llm.tensor_parallel_size: mlx-lm cannot shard {model_id} ({config.get('model_type')})")
        heads = text.get("num_attention_heads")
        kv_heads = text.get("num_key_value_heads") or heads
        for name, count in (("attention heads", heads), ("key/value heads", kv_heads)):
            if count and count % tp:
                raise ValueError(f"llm.tensor_parallel_size {tp} does not divide {model_id}'s {count} {name}")
    if spec.pipeline_parallel_size > 1:
        pp = spec.pipeline_parallel_size
        if not hasattr(getattr(model, "model", None), "pipeline"):
            raise ValueError(
                f"llm.pipeline_parallel_size: mlx-lm cannot pipeline {model_id} ({config.get('model_type')})"
            )
        layers = text.get("num_hidden_layers") or len(model.layers)
        if layers < pp:
            raise ValueError(f"llm.pipeline_parallel_size {pp} exceeds {model_id}'s {layers} layers")


def check_model_dir(model_dir: Path, spec: GangSpec, model_id: str) -> None:
    """check_shardable on a model directory, reading no weights."""
    from mlx_lm.utils import load_model

    model, config = load_model(Path(model_dir), lazy=True, strict=False)
    check_shardable(model, config, spec, model_id)


def load_sharded(model_dir: Path, group, spec: GangSpec, model_id: str):
    """This rank's shard of the model (mlx-lm's sharded_load, from a local directory): loaded
    lazily, split, and only then evaluated, so a rank reads only the weights its shard keeps."""
    import mlx.core as mx
    from mlx_lm.utils import load_model, load_tokenizer

    model, config = load_model(Path(model_dir), lazy=True, strict=False)
    check_shardable(model, config, spec, model_id)
    if spec.tensor_parallel_size > 1:
        model.shard(group)
    if spec.pipeline_parallel_size > 1:
        model.model.pipeline(group)
    mx.eval(model.parameters())
    tokenizer = load_tokenizer(Path(model_dir), eos_token_ids=config.get("eos_token_id"))
    mx.eval(mx.distributed.all_sum(mx.array(1.0), group=group))  # every rank loaded
    return model, tokenizer, config


class Doorbell:
    """Rank 0 wakes the other ranks for a round after an idle spell; they sleep on a socket
    till then.

    Rank 0 listens before the MLX group forms (`open`), so the others, who connect once it has
    formed (`connect`), always find it; rank 0 then accepts one connection per other rank."""

    def __init__(self, membership: Membership, timeout_s: float = 120.0):
        self.membership = membership
        self.timeout_s = timeout_s
        self.listener: socket.socket | None = None
        self.peers: list[socket.socket] = []  # rank 0: one per other rank; others: rank 0

    def open(self) -> Doorbell:
        if self.membership.rank == 0:
            _, port = self.membership.doorbell.rsplit(":", 1)
            self.listener = socket.create_server(("", int(port)), backlog=self.membership.spec.size)
        return self

    def connect(self) -> Doorbell:
        host, port = self.membership.doorbell.rsplit(":", 1)
        if self.listener is not None:
            self.listener.settimeout(self.timeout_s)
            self.peers = [self.listener.accept()[0] for _ in range(self.membership.spec.size - 1)]
            self.listener.close()
        else:
            self.peers = [_connect((host, int(port)), self.timeout_s)]
        for peer in self.peers:
            peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer.settimeout(None)
        return self

    def ring(self) -> None:
        for peer in self.peers:
            peer.sendall(b"\x01")

    def wait(self) -> None:
        if not self.peers[0].recv(1):
            raise ConnectionError("rank 0 of the gang is gone (its doorbell closed)")

    def close(self) -> None:
        for s in [*self.peers, *([self.listener] if self.listener else [])]:
            s.close()


def _connect(address: tuple[str, int], timeout_s: float) -> socket.socket:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return socket.create_connection(address, timeout=timeout_s)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class RoundChannel:
    """What rank 0 tells the others, in the order all ranks run it (each call is a collective)."""

    def __init__(self, group, doorbell: Doorbell | None = None):
        self.group = group
        self.rank = group.rank()
        self.doorbell = doorbell

    @property
    def leads(self) -> bool:
        return self.rank == 0

    def share(self, obj: Any = None, wake: bool = False) -> Any:
        """Rank 0's `obj` (pickled), on every rank. None travels as a size of 0. `wake`: the
        other ranks sleep on the doorbell first (a round after an idle spell, which every rank
        knows of alike: its batch was empty); a busy gang's rounds follow each other at once."""
        import mlx.core as mx
        import numpy as np

        if self.doorbell is not None and wake:
            if self.leads:
                self.doorbell.ring()
            else:
                self.doorbell.wait()
        data = pickle.dumps(obj) if self.leads and obj is not None else b""
        size = mx.distributed.all_sum(mx.array([len(data)], dtype=mx.int32), group=self.group).item()
        if size == 0:
            return None
        payload = mx.array(np.frombuffer(data, dtype=np.uint8)) if self.leads else mx.zeros((size,), dtype=mx.uint8)
        received = mx.distributed.all_sum(payload, group=self.group)
        mx.eval(received)  # on rank 0 too: a collective every rank must run, now, in this order
        return obj if self.leads else pickle.loads(np.array(received).tobytes())

    def picks(self, *arrays) -> list:
        """Rank 0's arrays on every rank (the others add zeros), lazily, in the step's graph."""
        import mlx.core as mx

        out = []
        for a in arrays:
            if a is None:
                out.append(None)
                continue
            # The others' zeros are made from their own picks, not from nothing: a collective
            # with no inputs in the step's graph may run before the forward's, and MLX's
            # collectives must run in the same order on every rank.
            mine = a.astype(mx.int32) if self.leads else a.astype(mx.int32) * 0
            out.append(mx.distributed.all_sum(mine, group=self.group).astype(a.dtype))
        return out
