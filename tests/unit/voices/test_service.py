"""The cluster's voices as Control serves them (`VoiceService`, without Ray): snapshots and their
long poll, and every refusal raised as the `APIError` the HTTP answer is made of."""

import asyncio

import pytest

from deployments.protocol.errors import APIError
from deployments.voices.service import VoiceService
from deployments.voices.store import MAX_VOICE_FILE_BYTES


@pytest.fixture
def service(tmp_path):
    return VoiceService(tmp_path / "control" / "voices")


async def register(service: VoiceService, name: str, audio: bytes = b"RIFF") -> dict:
    keys = (await service.add_files({f"{name}.wav": audio}))["keys"]
    return await service.put(name, {"ref_audio": keys[f"{name}.wav"], "ref_text": ""})


async def test_a_voice_is_added_by_its_files_keys_and_removed_by_name(service):
    snapshot = await register(service, "anna")
    assert snapshot["version"] == 1 and list(snapshot["voices"]) == ["anna"]
    key = snapshot["voices"]["anna"]["ref_audio"]
    assert await service.read_file(key) == b"RIFF"
    removed = await service.remove("ANNA")
    assert removed["removed"]["ref_audio"] == key
    assert (await service.snapshot())["voices"] == {}


async def test_removing_an_unknown_voice_is_no_error(service):
    assert await service.remove("nobody") == {"removed": None}  # the replica tries its own file next
    assert (await service.snapshot())["version"] == 0


async def test_an_unknown_file_is_a_404(service):
    with pytest.raises(APIError) as e:
        await service.read_file("0123456789abcdef-nobody.wav")
    assert (e.value.status_code, e.value.type, e.value.code) == (404, "invalid_request_error", "not_found")


async def test_an_oversized_file_is_a_413_and_changes_nothing(service):
    with pytest.raises(APIError) as e:
        await service.add_files({"big.wav": b"\0" * (MAX_VOICE_FILE_BYTES + 1)})
    assert (e.value.status_code, e.value.code) == (413, "voice_file_too_large")
    assert "voice file 'big.wav'" in e.value.message
    assert (await service.snapshot())["version"] == 0


async def test_a_bad_name_or_a_missing_file_is_a_400(service):
    keys = (await service.add_files({"a.wav": b"RIFF"}))["keys"]
    with pytest.raises(APIError) as e:
        await service.put("../evil", {"ref_audio": keys["a.wav"]})
    assert (e.value.status_code, e.value.type, e.value.param, e.value.code) == (
        400,
        "invalid_request_error",
        "name",
        "invalid_voice",
    )
    with pytest.raises(APIError) as e:
        await service.put("anna", {"ref_audio": "0123456789abcdef-gone.wav"})
    assert (e.value.status_code, e.value.param) == (400, "ref_audio") and "not a file of the store" in e.value.message
    with pytest.raises(APIError) as e:
        await service.add_files({"../a.wav": b"RIFF"})
    assert (e.value.status_code, e.value.param) == (400, "name")


async def test_a_long_poll_returns_at_the_next_change(service):
    keys = (await service.add_files({"anna.wav": b"RIFF"}))["keys"]
    seen = await service.snapshot()
    poll = asyncio.create_task(service.snapshot(seen["version"], seen["store"], timeout_s=10))
    await asyncio.sleep(0.05)
    assert not poll.done()
    await service.put("anna", {"ref_audio": keys["anna.wav"]})
    assert (await asyncio.wait_for(poll, 1))["version"] == seen["version"] + 1


async def test_a_long_poll_of_another_store_answers_at_once(service):
    snapshot = await asyncio.wait_for(service.snapshot(5, "another-store", timeout_s=10), 1)
    assert snapshot["store"] != "another-store"
