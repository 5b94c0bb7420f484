"""The prompt cache's disk tier on real engines: a prefix that engine A saw twice (the same
request again, a conversation's next turn, a second question on a system prompt) is answered by
a fresh engine on the same cache dir (a restarted or other replica of the node) from the disk,
with the same greedy text and `cached_tokens` equal to the stored prefix; what A saw once stays
in its RAM; a damaged file is ignored and removed and the answer is the cold one. The tiny model
for the code paths, SmolLM2 for a real answer."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from deployments.llm.disk_cache import DATA, ENTRY, clear_all
from deployments.llm.engine import EngineConfig, LLMEngine
from deployments.llm.prefix_cache import load_cache, save_cache, snapshot
from tests.unit.llm.test_prefix_cache import chat  # one greedy chat through an engine

SYSTEM_PROMPT = "You are a careful assistant who answers questions about animals in the wood. " * 6


def config(disk_dir: Path, **kw) -> EngineConfig:
    return EngineConfig(disk_cache_dir=str(disk_dir), disk_cache_min_tokens=16, **kw)


def conversation(user: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


async def serve_and_stop(model_dir: Path, disk_dir: Path, *requests: list[dict], **kw):
    """Engine A answers `requests` one after another, its disk writes finish, and it stops (a
    replica going away). Returns each answer (text, usage, prompt) and A's disk tier figures."""
    engine = await LLMEngine.start("model", model_dir, config(disk_dir, **kw))
    try:
        answers = [await chat(engine, messages) for messages in requests]
        engine.prefix_cache.disk.flush()
        return answers, engine.prompt_cache_tiers()["disk"]
    finally:
        engine.shutdown()


def stored_lengths(disk_dir: Path) -> list[int]:
    return sorted(int(p.name[:8]) for p in disk_dir.rglob("*" + ENTRY))


@pytest.fixture
async def cold(tiny_llm_dir):
    """The same model with no prompt cache at all: what a cold prefill answers."""
    engine = await LLMEngine.start("model", tiny_llm_dir, EngineConfig(prefix_cache_entries=0))
    yield engine
    engine.shutdown()


async def test_a_prompt_seen_once_stays_in_ram(tiny_llm_dir, tmp_path):
    """A one-off request writes nothing: its system prompt, history and answer are each seen once."""
    (answer,), disk = await serve_and_stop(tiny_llm_dir, tmp_path, conversation("What does a fox eat in winter?"))
    assert answer[1].prompt_tokens_details.cached_tokens == 0
    assert disk["writes"] == 0 and disk["entries"] == 0 and stored_lengths(tmp_path) == []
    assert disk["admitted"] == {"seen_once": 3, "kept_again": 0, "reused": 0, "evicted_after_reuse": 0}


async def test_a_fresh_engine_answers_from_the_disk_what_another_saw_twice(tiny_llm_dir, tmp_path, cold):
    messages = conversation("What does a fox eat in winter?")
    (first, again), disk = await serve_and_stop(tiny_llm_dir, tmp_path, messages, messages)
    prompt = first[2]
    assert first[1].prompt_tokens_details.cached_tokens == 0 and again[0] == first[0]
    # The second request reused its history from RAM (written then) and kept the same answer
    # again (written then); the system prompt was never seen again on its own.
    assert disk["admitted"] == {"seen_once": 3, "kept_again": 1, "reused": 1, "evicted_after_reuse": 0}
    history = len(prompt.token_ids) - 1
    assert stored_lengths(tmp_path) == [history, len(prompt.token_ids) + 12]  # the answer's: the prompt, 12 tokens
    engine = await LLMEngine.start("model", tiny_llm_dir, config(tmp_path))
    try:
        text, usage, _ = await chat(engine, messages)
        assert usage.prompt_tokens_details.cached_tokens == history
        assert text == first[0] == (await chat(cold, messages))[0]
        tiers = engine.prompt_cache_tiers()
        assert tiers["disk"]["hits"] == 1 and tiers["disk"]["cached_tokens"] == history
        assert tiers["ram"]["cached_tokens"] == 0
    finally:
        engine.shutdown()


async def test_the_third_turn_on_a_fresh_engine_starts_from_the_history_the_second_reused(tiny_llm_dir, tmp_path, cold):
    """A conversation's second turn is its first turn's second sight: that history reaches disk
    before the replica can die, and the next turn, elsewhere, starts from it."""
    messages = conversation("Once upon a time there was a fox.")
    engine = await LLMEngine.start("model", tiny_llm_dir, config(tmp_path))
    try:
        first, _, prompt = await chat(engine, messages)
        messages += [{"role": "assistant", "content": first}, {"role": "user", "content": "And then?"}]
        second, usage, _ = await chat(engine, messages)
        reused = usage.prompt_tokens_details.cached_tokens
        assert reused >= len(prompt.token_ids) - 1  # the whole first turn, from RAM
        engine.prefix_cache.disk.flush()
    finally:
        engine.shutdown()
    (stored,) = stored_lengths(tmp_path)  # the first turn's prompt or answer: where a cache was kept
    assert len(prompt.token_ids) - 1 <= stored <= reused
    messages += [{"role": "assistant", "content": second}, {"role": "user", "content": "How did it end?"}]
    engine = await LLMEngine.start("model", tiny_llm_dir, config(tmp_path))
    try:
        text, usage, _ = await chat(engine, messages)
        assert usage.prompt_tokens_details.cached_tokens == stored
        assert text == (await chat(cold, messages))[0]
    finally:
        engine.shutdown()


async def test_a_system_prompt_two_questions_shared_is_found_on_disk_for_a_third(tiny_llm_dir, tmp_path, cold):
    """The second question reuses the first's cache up to where the two questions diverge; what
    is written is the system prompt, where a cache was kept, not that point."""
    (fox, badger), _ = await serve_and_stop(
        tiny_llm_dir, tmp_path, conversation("What is a fox?"), conversation("What is a badger?")
    )
    system_end = fox[2].system_end
    assert badger[1].prompt_tokens_details.cached_tokens > system_end  # the template's next tokens too
    assert stored_lengths(tmp_path) == [system_end]
    engine = await LLMEngine.start("model", tiny_llm_dir, config(tmp_path))
    try:
        messages = conversation("Tell me about owls.")
        text, usage, prompt = await chat(engine, messages)
        assert usage.prompt_tokens_details.cached_tokens == prompt.system_end == system_end
        assert text == (await chat(cold, messages))[0]
    finally:
        engine.shutdown()


async def test_a_truncated_cache_file_is_ignored_removed_and_the_answer_is_the_cold_one(tiny_llm_dir, tmp_path, cold):
    messages = conversation("Where do badgers sleep?")
    await serve_and_stop(tiny_llm_dir, tmp_path, messages, messages)
    files = list(tmp_path.rglob("*" + DATA))
    halves = [f.stat().st_size // 2 for f in files]
    for f, half in zip(files, halves):
        f.write_bytes(f.read_bytes()[:half])
    engine = await LLMEngine.start("model", tiny_llm_dir, config(tmp_path))
    try:
        text, usage, prompt = await chat(engine, messages)
        assert usage.prompt_tokens_details.cached_tokens == 0
        assert text == (await chat(cold, messages))[0]
        # The one the prompt could start from (the history; not the answer's, longer) was removed.
        (history,) = [(f, half) for f, half in zip(files, halves) if int(f.name[:8]) < len(prompt.token_ids)]
        assert engine.prompt_cache_tiers()["disk"]["errors"] == 1 and not history[0].exists()
        # The request again here is its second sight on this engine: written again, whole.
        await chat(engine, messages)
        engine.prefix_cache.disk.flush()
        assert history[0].stat().st_size > history[1]
    finally:
        engine.shutdown()


async def test_weights_changed_in_place_are_another_key(tiny_llm_dir, tmp_path):
    """New weights under the same path (here: the same bytes, a new mtime) never load a cache
    made with the old ones."""
    model_dir = tmp_path / "model"
    shutil.copytree(tiny_llm_dir, model_dir)
    messages = conversation("Do hedgehogs swim?")
    await serve_and_stop(model_dir, tmp_path / "disk", messages, messages)
    assert stored_lengths(tmp_path / "disk")
    for weights in model_dir.glob("*.safetensors"):
        os.utime(weights, (1, 1))
    engine = await LLMEngine.start("model", model_dir, config(tmp_path / "disk"))
    try:
        _, usage, _ = await chat(engine, messages)
        assert usage.prompt_tokens_details.cached_tokens == 0
        assert len([d for d in (tmp_path / "disk").iterdir() if d.is_dir()]) == 2  # two keys
    finally:
        engine.shutdown()


async def test_clearing_the_node_leaves_nothing_to_load(tiny_llm_dir, tmp_path):
    messages = conversation("What do moles eat?")
    await serve_and_stop(tiny_llm_dir, tmp_path, messages, messages)
    engine = await LLMEngine.start("model", tiny_llm_dir, config(tmp_path))
    try:
        removed = clear_all(tmp_path)  # what the replica does for POST /v1/models/cache/clear
        assert removed["entries"] == 2 and removed["bytes"] > 0
        _, usage, _ = await chat(engine, messages)
        assert usage.prompt_tokens_details.cached_tokens == 0
    finally:
        engine.shutdown()


async def test_smollm2_answers_from_the_disk_as_it_answers_cold(smollm2_dir, tmp_path):
    """The real default model: engine B's answer from engine A's stored prefix is A's answer."""
    messages = [
        {"role": "system", "content": "You are a geography teacher. Answer in one short sentence. " * 5},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    ((first, _, prompt), _), _ = await serve_and_stop(smollm2_dir, tmp_path, messages, messages)
    assert "Paris" in first
    engine = await LLMEngine.start("model", smollm2_dir, config(tmp_path))
    try:
        text, usage, _ = await chat(engine, messages)
        assert usage.prompt_tokens_details.cached_tokens == len(prompt.token_ids) - 1
        assert text == first
    finally:
        engine.shutdown()


async def test_a_failing_disk_tier_turns_itself_off_and_the_ram_tier_goes_on(tiny_llm_dir, tmp_path, cold, caplog):
    engine = await LLMEngine.start("model", tiny_llm_dir, config(tmp_path))
    try:

        def broken(*args):
            raise MemoryError("no room for a snapshot")

        engine.prefix_cache.disk.offer = broken
        messages = conversation("Can owls see in daylight?")
        text, _, prompt = await chat(engine, messages)
        again, usage, _ = await chat(engine, messages)  # its second sight: offered, and it fails
        assert engine.prefix_cache is not None and engine.prefix_cache.disk is None
        assert "turned off for this replica" in caplog.text
        assert usage.prompt_tokens_details.cached_tokens == len(prompt.token_ids) - 1  # RAM served it
        assert again == text == (await chat(cold, messages))[0]
        _, usage, _ = await chat(engine, messages)  # and still does
        assert usage.prompt_tokens_details.cached_tokens == len(prompt.token_ids) - 1
        assert "disk" not in engine.prompt_cache_tiers()
    finally:
        engine.shutdown()


def test_a_snapshot_saves_only_the_filled_part_and_loads_back_equal(tmp_path):
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    cache = KVCache()
    keys = mx.arange(6 * 5 * 4, dtype=mx.float32).reshape(1, 6, 5, 4)
    cache.update_and_fetch(keys, keys + 1)  # a 256-slot buffer holding 5 positions
    cache.trim(2)  # 3 left, as a trimmed RAM hit
    path = str(tmp_path / "c.safetensors")
    save_cache(path, snapshot([cache]))
    (loaded,) = load_cache(path)
    assert loaded.offset == 3 and loaded.keys.shape == (1, 6, 3, 4)
    assert mx.array_equal(loaded.keys, keys[..., :3, :]) and mx.array_equal(loaded.values, keys[..., :3, :] + 1)
