"""The prompt cache's disk tier: KV caches of long prompt prefixes kept under the cache dir, so
they outlive a replica and serve every LLM replica of the node (they share the path).

Layout: `<cache_dir>/prompt-cache/<model key>/<length>-<token hash>.safetensors` (the KV cache,
written by the caller's `save`) and `.json` beside it (the entry: its exact tokens, the data
file's size and CRC-32). The model key (`model_key`) names everything a cache depends on besides
its tokens: the resolved model directory and the size and mtime of each of its files, the dtype
the weights are served in, the chat template, the format. An entry is looked up by the longest
of its lengths whose token hash the prompt's own prefix has, and loaded only when its stored
tokens are that prefix exactly and its data file has the recorded size and checksum: anything
else (a torn, truncated or corrupt file) is removed and never loaded.

Writes happen on a writer thread fed by a bounded queue (`offer` never blocks the caller, the
engine thread); each file goes to a temporary name and is renamed into place, the data before
the entry, so a reader never sees half a file and two replicas writing the same prefix at once
both end with the same complete entry. A size budget over the whole `prompt-cache` directory is
kept by least-recently-used eviction (an entry's mtime is its last use). A write error (a full
disk) stops the writes with one WARNING; an unwritable directory turns the tier off with one.

No Ray and no MLX: the caller passes how a cache is saved and loaded (deployments/llm/
prefix_cache.py passes mlx-lm's), so the logic here is tested with plain files.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import re
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

logger = logging.getLogger(__name__)

PROMPT_CACHE_DIR = "prompt-cache"  # under the cache dir
FORMAT = 1  # bump when what an entry holds changes: old entries then fall under another key
DATA, ENTRY = ".safetensors", ".json"
TMP_MARK = ".tmp-"
ORPHAN_AGE_S = 600.0  # a data file without its entry, or a temporary file, older than this is debris
_NAME = re.compile(r"^(\d{8})-([0-9a-f]{32})$")


# ---------------------------------------------------------------------------- keys


def model_key(model_id: str, model_dir: Path, served_dtype: str, chat_template: Optional[str], extra: str = "") -> str:
    """A directory name that changes whenever the model's KV caches could: a readable slug of
    the id, then a hash of the resolved model directory, each file's name, size and mtime (the
    weights, config and tokenizer), the dtype the weights are served in, the chat template,
    `extra` (the mlx-lm version) and the format."""
    resolved = Path(model_dir).resolve()
    h = hashlib.sha256()
    for part in (str(resolved), served_dtype, chat_template or "", extra, str(FORMAT)):
        h.update(part.encode() + b"\0")
    for path in sorted(resolved.rglob("*")):
        if path.is_file():
            st = path.stat()  # follows the Hugging Face cache's symlinks to the blobs
            h.update(f"{path.relative_to(resolved)}:{st.st_size}:{st.st_mtime_ns}\0".encode())
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id).strip("_")[-48:] or "model"
    return f"{slug}-{h.hexdigest()[:16]}"


def _token_bytes(tokens: Iterable[int]) -> bytes:
    return np.asarray(list(tokens), dtype="<i8").tobytes()


def entry_name(tokens: list[int]) -> str:
    """`<length>-<hash of the token ids>`: the length first, so a lookup hashes only the prompt
    prefixes of lengths that exist."""
    return f"{len(tokens):08d}-{hashlib.sha256(_token_bytes(tokens)).hexdigest()[:32]}"


def longest_stored_prefix(tokens: list[int], names: Iterable[str], longer_than: int = 0) -> Optional[str]:
    """The name of the longest stored entry whose tokens hash as a prefix of `tokens` (longer
    than `longer_than`), or None. One pass of one hash over the prompt."""
    lengths: dict[int, set[str]] = {}
    for name in names:
        m = _NAME.match(name)
        if m:
            lengths.setdefault(int(m.group(1)), set()).add(m.group(2))
    found = longest_prefix(tokens, lengths, longer_than)
    return None if found is None else entry_name(tokens[:found])


def longest_prefix(tokens: list[int], hashes: dict[int, set[str]], longer_than: int = 0) -> Optional[int]:
    """The length of the longest prefix of `tokens` among `hashes` (length -> the token hashes
    of `entry_name` at that length), longer than `longer_than`; None when there is none. One
    pass of one hash over the tokens, stopping at the longest length there is."""
    lengths = sorted(n for n in hashes if longer_than < n <= len(tokens))
    if not lengths:
        return None
    data = _token_bytes(tokens[: lengths[-1]])
    h, done, found = hashlib.sha256(), 0, None
    for length in lengths:
        h.update(data[done * 8 : length * 8])
        done = length
        if h.copy().hexdigest()[:32] in hashes[length]:
            found = length
    return found


@dataclass
class StoredFile:
    """What eviction needs to know of an entry: its name, bytes on disk and last use."""

    directory: Path
    name: str
    nbytes: int
    last_used: float


def lru_victims(entries: list[StoredFile], budget_bytes: int) -> list[StoredFile]:
    """The least recently used entries to remove so that the rest fit in `budget_bytes`."""
    total = sum(e.nbytes for e in entries)
    victims = []
    for e in sorted(entries, key=lambda e: e.last_used):
        if total <= budget_bytes:
            break
        victims.append(e)
        total -= e.nbytes
    return victims


# ---------------------------------------------------------------------------- load or prefill


class LoadRule:
    """Whether loading a stored prefix beats prefilling it, learned on this replica.

    Two running means: seconds per token to load an entry (measured on each load) and to
    prefill (measured by the engine on each admitted prompt that prefilled at least
    `min_prefill_sample` tokens: the time to its first token over the tokens it prefilled, an
    overestimate under load, which leans toward loading). A disk
    entry of `stored` tokens, when `cached` are already in RAM, is loaded when
    `stored * load_s_per_token < (stored - cached) * prefill_s_per_token`. Until both are
    measured, it is loaded: the first load is what measures it."""

    def __init__(self, weight: float = 0.2, min_prefill_sample: int = 64):
        self.weight = weight
        self.min_prefill_sample = min_prefill_sample
        self.load_s_per_token: Optional[float] = None
        self.prefill_s_per_token: Optional[float] = None

    def _mean(self, old: Optional[float], new: float) -> float:
        return new if old is None else (1 - self.weight) * old + self.weight * new

    def loaded(self, tokens: int, seconds: float) -> None:
        if tokens > 0:
            self.load_s_per_token = self._mean(self.load_s_per_token, seconds / tokens)

    def prefilled(self, tokens: int, seconds: float) -> None:
        # A short prefill is mostly the step's fixed cost (and the wait for the running batch):
        # per token it would look slow and make every load look worth it.
        if tokens >= self.min_prefill_sample:
            self.prefill_s_per_token = self._mean(self.prefill_s_per_token, seconds / tokens)

    def worth_loading(self, stored: int, cached: int) -> bool:
        if stored <= cached:
            return False
        if self.load_s_per_token is None or self.prefill_s_per_token is None:
            return True
        return stored * self.load_s_per_token < (stored - cached) * self.prefill_s_per_token


# ---------------------------------------------------------------------------- the store


@dataclass
class Counters:
    hits: int = 0
    misses: int = 0
    writes: int = 0
    errors: int = 0  # entries found corrupt and removed, loads and writes that failed
    dropped: int = 0  # writes skipped because the writer's queue was full
    evicted: int = 0


class DiskCache:
    """One model's disk tier on this node. `save(path, payload)` writes what `offer` was given;
    `load(path)` returns the cache. Thread-safe: `offer`, `lookup`, `load` run on the engine
    thread, writes on the tier's own thread."""

    def __init__(
        self,
        root: Path,
        model_key: str,
        budget_bytes: int,
        min_tokens: int,
        save: Callable[[str, Any], None],
        load: Callable[[str], Any],
        queue_size: int = 4,
    ):
        self.root = Path(root)  # <cache_dir>/prompt-cache: the budget's scope
        self.directory = self.root / model_key
        self.budget_bytes = budget_bytes
        self.min_tokens = min_tokens
        self._save, self._load = save, load
        self.counters = Counters()
        self.enabled = budget_bytes > 0 and self._usable()
        self.writing = self.enabled  # False once a write failed (a full disk)
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._lock = threading.Lock()
        self._writer: Optional[threading.Thread] = None

    def _usable(self) -> bool:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            probe = self.directory / f"{TMP_MARK}probe-{uuid.uuid4().hex}"
            probe.write_bytes(b"")
            probe.unlink()
            return True
        except OSError as e:
            logger.warning("The prompt cache's disk tier is off: %s is not writable (%s)", self.directory, e)
            return False

    # ------------------------------------------------------------------ reading

    def lookup(self, tokens: list[int], longer_than: int = 0) -> Optional[str]:
        """The longest stored prefix of `tokens` longer than `longer_than`, by name."""
        if not self.enabled or len(tokens) < self.min_tokens:  # nothing shorter is stored
            return None
        try:
            names = [n[: -len(ENTRY)] for n in os.listdir(self.directory) if n.endswith(ENTRY)]
        except OSError:
            names = []
        found = longest_stored_prefix(tokens, names, longer_than)
        if found is None:
            self.counters.misses += 1
        return found

    def read(self, name: str, tokens: list[int]) -> Optional[tuple[Any, int]]:
        """The cache of entry `name` and its length in tokens, once checked against `tokens`
        (the prompt) and its checksum; None (and the entry removed if it was bad) otherwise."""
        entry_path, data_path = self._paths(name)
        entry_file = None
        try:
            entry_file = _identity(entry_path)
            entry = json.loads(entry_path.read_text())
            data = data_path.read_bytes()
        except FileNotFoundError:
            # Data is written before its entry and removed after it: the entry file read, still
            # there, without its data is a bad entry. Another writer may have removed and written
            # the entry again meanwhile (a new file): that is a miss, and its entry is good.
            if entry_file is not None and _identity(entry_path) == entry_file and not data_path.exists():
                return self._corrupt(name, "its data file is missing")
            self.counters.misses += 1  # evicted or cleared by another replica meanwhile
            return None
        except (OSError, ValueError) as e:
            return self._corrupt(name, f"unreadable entry ({e})")
        problem = _check(entry, data, tokens)
        if problem:
            return self._corrupt(name, problem)
        try:
            cache = self._load(str(data_path))
        except Exception as e:
            if not data_path.exists():  # removed by another replica after the check
                self.counters.misses += 1
                return None
            return self._corrupt(name, f"the cache does not load ({e})")
        self._touch(entry_path)
        self.counters.hits += 1
        return cache, len(entry["tokens"])

    def _corrupt(self, name: str, why: str) -> None:
        logger.warning("Prompt cache entry %s is ignored and removed: %s", name, why)
        self.counters.errors += 1
        _remove(self.directory, name)
        return None

    # ------------------------------------------------------------------ writing

    def wants(self, tokens: list[int]) -> bool:
        """Whether a cache of `tokens` would be written: long enough and not stored already."""
        if not self.writing or len(tokens) < self.min_tokens:
            return False
        entry_path, _ = self._paths(entry_name(tokens))
        if entry_path.exists():
            self._touch(entry_path)  # used again: it stays longer under the budget
            return False
        return True

    def offer(self, tokens: list[int], payload: Any) -> bool:
        """Queue `payload` (the cache of `tokens`, ready to save) for the writer; never blocks.
        False when it is not written (the queue is full, or writes are off)."""
        if not self.writing:
            return False
        self._start_writer()
        try:
            self._queue.put_nowait((list(tokens), payload))
            return True
        except queue.Full:
            self.counters.dropped += 1
            return False

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until what was offered so far is written (for tests and shutdown)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop writing now, without waiting: what is queued is dropped (a failing tier)."""
        self.writing = False
        try:
            self._queue.put_nowait(None)
        except queue.Full:  # the writer drains the queue without writing, then waits: a daemon
            pass

    def close(self) -> None:
        """Write what is queued, then stop the writer."""
        if self._writer is not None:
            self._queue.put(None)
            self._writer.join(timeout=30)
            self._writer = None

    def _start_writer(self) -> None:
        with self._lock:
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_loop, name="prompt-cache-writer", daemon=True)
                self._writer.start()

    def _write_loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if self.writing:
                    self.write(*item)
            finally:
                self._queue.task_done()

    def write(self, tokens: list[int], payload: Any) -> bool:
        """Write one entry now (the writer thread's work): data, then the entry, each under a
        temporary name renamed into place; then keep the budget."""
        name = entry_name(tokens)
        entry_path, data_path = self._paths(name)
        if entry_path.exists():
            return False
        tag = f"{TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp_data, tmp_entry = data_path.with_name(name + tag + DATA), entry_path.with_name(name + tag + ENTRY)
        try:
            self._save(str(tmp_data), payload)
            blob = tmp_data.read_bytes()
            entry = {"format": FORMAT, "tokens": list(tokens), "bytes": len(blob), "crc32": zlib.crc32(blob)}
            os.replace(tmp_data, data_path)
            tmp_entry.write_text(json.dumps(entry))
            os.replace(tmp_entry, entry_path)
        except OSError as e:
            _discard(tmp_data, tmp_entry)
            self.counters.errors += 1
            self.writing = False
            logger.warning("The prompt cache's disk tier stops writing (it still reads): %s", e)
            return False
        except Exception as e:  # a cache the saver cannot write: skip it, keep writing others
            _discard(tmp_data, tmp_entry)
            self.counters.errors += 1
            logger.warning("A prompt cache was not written to disk: %s", e)
            return False
        self.counters.writes += 1
        self.evict()
        return True

    # ------------------------------------------------------------------ the budget

    def scan(self) -> list[StoredFile]:
        return scan(self.root)

    def evict(self) -> None:
        for victim in lru_victims(self.scan(), self.budget_bytes):
            _remove(victim.directory, victim.name)
            self.counters.evicted += 1

    def clear(self) -> dict[str, int]:
        """Remove this model's entries on this node; what was removed."""
        removed = [e for e in self.scan() if e.directory == self.directory]
        for e in removed:
            _remove(e.directory, e.name)
        return {"entries": len(removed), "bytes": sum(e.nbytes for e in removed)}

    def stats(self) -> dict[str, Any]:
        mine = [e for e in self.scan() if e.directory == self.directory] if self.enabled else []
        return {
            "enabled": self.enabled,
            "writing": self.writing,
            "entries": len(mine),
            "bytes": sum(e.nbytes for e in mine),
            **vars(self.counters),
        }

    # ------------------------------------------------------------------ files

    def _paths(self, name: str) -> tuple[Path, Path]:
        return self.directory / (name + ENTRY), self.directory / (name + DATA)

    @staticmethod
    def _touch(path: Path) -> None:
        try:
            os.utime(path)
        except OSError:
            pass


def scan(root: Path) -> list[StoredFile]:
    """Every entry under the root (all models: they share the budget); debris removed."""
    entries = []
    now = time.time()
    try:
        directories = [d for d in Path(root).iterdir() if d.is_dir()]
    except OSError:
        return []
    for directory in directories:
        try:
            files = {f.name: f for f in os.scandir(directory)}
        except OSError:
            continue
        for fname, f in files.items():
            stem = fname.rsplit(".", 1)[0]
            try:
                st = f.stat()
            except OSError:
                continue
            if TMP_MARK in fname or (fname.endswith(DATA) and stem + ENTRY not in files):
                if now - st.st_mtime > ORPHAN_AGE_S:
                    _discard(Path(f.path))
                continue
            if fname.endswith(ENTRY) and _NAME.match(stem):
                data = files.get(stem + DATA)
                try:
                    nbytes = st.st_size + (data.stat().st_size if data else 0)
                except OSError:
                    continue
                entries.append(StoredFile(directory, stem, nbytes, st.st_mtime))
    return entries


def clear_all(root: Path) -> dict[str, int]:
    """Remove every entry under `root` (every model's, on this node); what was removed."""
    removed = scan(root)
    for e in removed:
        _remove(e.directory, e.name)
    return {"entries": len(removed), "bytes": sum(e.nbytes for e in removed)}


def _discard(*paths: Path) -> None:
    for p in paths:
        try:
            p.unlink()
        except OSError:
            pass


def _identity(path: Path) -> Optional[tuple[int, int]]:
    """Which file is at `path` (a rename puts a new one there), or None if none is."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


def _remove(directory: Path, name: str) -> None:
    # The entry first: a data file without its entry is never read, only swept up later.
    _discard(directory / (name + ENTRY), directory / (name + DATA))


def _check(entry: dict, data: bytes, tokens: list[int]) -> Optional[str]:
    """What is wrong with a stored entry for this prompt, or None."""
    stored = entry.get("tokens")
    if entry.get("format") != FORMAT or not isinstance(stored, list):
        return "unknown format"
    if stored != tokens[: len(stored)]:
        return "its tokens are not the prompt's prefix"
    if len(data) != entry.get("bytes"):
        return f"{len(data)} bytes where {entry.get('bytes')} were written (truncated)"
    if zlib.crc32(data) != entry.get("crc32"):
        return "checksum mismatch"
    return None
