"""The prompt cache's disk tier on real engines: a prompt prefilled by one engine is answered by a
fresh engine on the same cache dir (a restarted or other replica of the node) from the disk,
with the same greedy text and `cached_tokens` equal to the stored prefix; a damaged file is
ignored and removed and the answer is the cold one. The tiny model for the code paths, SmolLM2
for a real answer."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from deployments.llm.disk_cache import DATA, clear_all
from deployments.llm.engine import EngineConfig, LLMEngine
from deployments.llm.prefix_cache import load_cache, save_cache, snapshot
from tests.unit.llm.test_prefix_cache import chat  # one greedy chat through an engine

SYSTEM_PROMPT = "You are a careful assistant who answers questions about animals in the wood. " * 6


def config(disk_dir: Path, **kw) -> EngineConfig:
    return EngineConfig(disk_cache_dir=str(disk_dir), disk_cache_min_tokens=16, **kw)


def conversation(user: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


async def prefill_and_stop(model_dir: Path, disk_dir: Path, messages: list[dict], **kw):
    """Engine A answers `messages`, its disk writes finish, and it stops (a replica going away)."""
    engine = await LLMEngine.start("model", model_dir, config(disk_dir, **kw))
    try:
        answer = await chat(engine, messages)
        engine.prefix_cache.disk.flush()
        return answer
    finally:
        engine.shutdown()


@pytest.fixture
async def cold(tiny_llm_dir):
    """The same model with no prompt cache at all: what a cold prefill answers."""
    engine = await LLMEngine.start("model", tiny_llm_dir, EngineConfig(prefix_cache_entries=0))
    yield engine
    engine.shutdown()


async def test_a_fresh_engine_answers_from_the_disk_what_another_prefilled(tiny_llm_dir, tmp_path, cold):
    messages = conversation("What does a fox eat in winter?")
    first, usage, prompt = await prefill_and_stop(tiny_llm_dir, tmp_path, messages)
    assert usage.prompt_tokens_details.cached_tokens == 0
    engine = await LLMEngine.start("model", tiny_llm_dir, config(tmp_path))
    try:
        text, usage, _ = await chat(engine, messages)
        assert usage.prompt_tokens_details.cached_tokens == len(prompt.token_ids) - 1
        assert text == first == (await chat(cold, messages))[0]
        tiers = engine.prompt_cache_tiers()
        assert tiers["disk"]["hits"] == 1 and tiers["disk"]["cached_tokens"] == len(prompt.token_ids) - 1
        assert tiers["disk"]["entries"] >= 2 and tiers["disk"]["bytes"] > 0  # the system prompt, the history
        assert tiers["ram"]["cached_tokens"] == 0
    finally:
        engine.shutdown()


async def test_the_next_turn_on_a_fresh_engine_starts_from_the_stored_history(tiny_llm_dir, tmp_path, cold):
    messages = conversation("Once upon a time there was a fox.")
    answer, _, prompt = await prefill_and_stop(tiny_llm_dir, tmp_path, messages)
    messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And then?"}]
    engine = await LLMEngine.start("model", tiny_llm_dir, config(tmp_path))
    try:
        text, usage, _ = await chat(engine, messages)
        assert usage.prompt_tokens_details.cached_tokens >= len(prompt.token_ids) - 1
        assert text == (await chat(cold, messages))[0]
    finally:
        engine.shutdown()


async def test_a_shared_system_prompt_is_found_on_disk_for_a_new_question(tiny_llm_dir, tmp_path, cold):
    await prefill_and_stop(tiny_llm_dir, tmp_path, conversation("What is a fox?"))
    engine = await LLMEngine.start("model", tiny_llm_dir, config(tmp_path))
    try:
        messages = conversation("Tell me about owls.")
        text, usage, prompt = await chat(engine, messages)
        assert usage.prompt_tokens_details.cached_tokens == prompt.system_end
        assert text == (await chat(cold, messages))[0]
    finally:
        engine.shutdown()


async def test_a_truncated_cache_file_is_ignored_removed_and_the_answer_is_the_cold_one(tiny_llm_dir, tmp_path, cold):
    messages = conversation("Where do badgers sleep?")
    await prefill_and_stop(tiny_llm_dir, tmp_path, messages)
    files = list(tmp_path.rglob("*" + DATA))
    assert files
    halves = [f.stat().st_size // 2 for f in files]
    for f, half in zip(files, halves):
        f.write_bytes(f.read_bytes()[:half])
    engine = await LLMEngine.start("model", tiny_llm_dir, config(tmp_path))
    try:
        text, usage, prompt = await chat(engine, messages)
        assert usage.prompt_tokens_details.cached_tokens == 0
        assert text == (await chat(cold, messages))[0]
        # Those the prompt could start from (the system prompt, the history; not the answer's)
        # were each removed, and written again, whole, from this engine's own prefill.
        usable = [(f, half) for f, half in zip(files, halves) if int(f.name[:8]) < len(prompt.token_ids)]
        assert len(usable) == 2 and engine.prompt_cache_tiers()["disk"]["errors"] == 2
        engine.prefix_cache.disk.flush()
        assert all(f.stat().st_size > half for f, half in usable if f.exists())
    finally:
        engine.shutdown()


async def test_weights_changed_in_place_are_another_key(tiny_llm_dir, tmp_path):
    """New weights under the same path (here: the same bytes, a new mtime) never load a cache
    made with the old ones."""
    model_dir = tmp_path / "model"
    shutil.copytree(tiny_llm_dir, model_dir)
    messages = conversation("Do hedgehogs swim?")
    await prefill_and_stop(model_dir, tmp_path / "disk", messages)
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
    await prefill_and_stop(tiny_llm_dir, tmp_path, messages)
    engine = await LLMEngine.start("model", tiny_llm_dir, config(tmp_path))
    try:
        removed = clear_all(tmp_path)  # what the replica does for POST /v1/models/cache/clear
        assert removed["entries"] >= 2 and removed["bytes"] > 0
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
    first, _, prompt = await prefill_and_stop(smollm2_dir, tmp_path, messages)
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
        assert engine.prefix_cache is not None and engine.prefix_cache.disk is None
        assert "turned off for this replica" in caplog.text
        again, usage, _ = await chat(engine, messages)  # the RAM tier still serves it
        assert usage.prompt_tokens_details.cached_tokens == len(prompt.token_ids) - 1
        assert again == text == (await chat(cold, messages))[0]
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
