"""A TTS replica's voice library without Ray: over the registry file alone, and over Control's
real voice methods reached through a stand-in for the handle, whose refusals arrive wrapped as
Ray hands them over. Every failure is the `APIError` the HTTP answer is made of."""

import pickle
from types import SimpleNamespace

import numpy as np
import pytest
from ray.exceptions import RayTaskError

from deployments.audio.encode import encode_wav
from deployments.control.deployment import Control
from deployments.protocol.errors import APIError
from deployments.voices.library import VoiceLibrary
from deployments.voices.registry import VoiceEntry
from deployments.voices.service import VoiceService
from deployments.voices.store import MAX_VOICE_FILE_BYTES

RATE = 24000
SPEAKER = SimpleNamespace(
    model_id="tiny", model_type="pocket_tts", sample_rate=RATE, presets=["alba"], default_preset=None, preset_aliases={}
)
WAV = encode_wav((0.1 * np.sin(np.arange(RATE // 2) / 8)).astype(np.float32), RATE)


class Handle:
    """Control's methods as a handle calls them (`.remote`); what Control raises arrives as Ray
    gives it to the caller: pickled, in a RayTaskError that is also an instance of it."""

    def __init__(self, control):
        self.control = control
        self.calls: list[str] = []

    def __getattr__(self, method):
        async def remote(*args):
            self.calls.append(method)
            try:
                return await getattr(self.control, method)(*args)
            except Exception as e:
                raise RayTaskError(method, "traceback", pickle.loads(pickle.dumps(e))).as_instanceof_cause() from None

        return SimpleNamespace(remote=remote)


@pytest.fixture
def control(tmp_path):
    control = object.__new__(Control.func_or_class)
    control.voice_service = VoiceService(tmp_path / "control" / "voices")
    return control


def node(tmp_path, name: str, control=None) -> VoiceLibrary:
    return VoiceLibrary(tmp_path / name / "voices.json", cluster=Handle(control) if control else None)


async def speaker():
    return SPEAKER


async def test_a_refusal_of_the_cluster_is_the_plain_api_error(tmp_path, control):
    library = node(tmp_path, "a", control)
    with pytest.raises(APIError) as e:
        await library.store_files({"big.wav": b"\0" * (MAX_VOICE_FILE_BYTES + 1)})
    assert type(e.value) is APIError  # not Ray's wrapper: it crosses to the ingress as any other
    assert (e.value.status_code, e.value.type, e.value.code) == (413, "invalid_request_error", "voice_file_too_large")
    with pytest.raises(APIError) as e:
        await library.register("../evil", VoiceEntry(ref_audio="0123456789abcdef-a.wav"))
    assert (type(e.value), e.value.status_code, e.value.param, e.value.code) == (APIError, 400, "name", "invalid_voice")


async def test_an_unknown_voice_is_a_404_listing_the_valid_ones(tmp_path, control):
    library = node(tmp_path, "a", control)
    with pytest.raises(APIError) as e:
        await library.resolve("nobody", SPEAKER)
    assert (e.value.status_code, e.value.param, e.value.code) == (404, "voice", "voice_not_found")
    assert e.value.message == "Voice 'nobody' is not available. Available voices: alba"
    assert library.cluster.calls == ["voices"]  # it asked the cluster first: a voice of another node?


async def test_a_voice_registered_on_another_node_resolves_at_once(tmp_path, control):
    a, b = node(tmp_path, "a", control), node(tmp_path, "b", control)
    assert await a.register_recording(speaker, "anna", WAV, "hello", ["ann"]) == {
        "name": "anna",
        "aliases": ["ann"],
        "source": "registry",
    }
    voice = await b.resolve("ANN", SPEAKER)  # before b's long poll brought it
    assert voice.name == "anna" and voice.ref_text == "hello" and voice.ref_audio.parent == b.dir
    assert (await b.recording(voice, RATE)).size == RATE // 2
    assert [v["name"] for v in b.listing(SPEAKER)["voices"]] == ["anna", "alba"]


async def test_a_registration_is_checked_before_the_model_is_asked(tmp_path):
    library = node(tmp_path, "a")

    async def no_model():
        raise AssertionError("the name is checked first")

    for name, aliases in (("default", None), ("bad name", None), ("anna", ["../x"])):
        with pytest.raises(APIError) as e:
            await library.register_recording(no_model, name, WAV, aliases=aliases)
        assert (e.value.status_code, e.value.param) == (400, "name")
    with pytest.raises(APIError) as e:
        await library.register_recording(speaker, "ALBA", WAV)
    assert (e.value.status_code, e.value.code) == (400, "voice_exists")
    with pytest.raises(APIError) as e:
        await library.register_recording(speaker, "anna", b"not audio")
    assert (e.value.status_code, e.value.param, e.value.code) == (400, "reference_audio", "invalid_reference_audio")
    assert library.registry.data().voices == {}


async def test_without_a_control_plane_the_file_is_the_registry(tmp_path):
    library = node(tmp_path, "a")
    await library.register_recording(speaker, "anna", WAV)
    files = await library.store_trained("anna", np.zeros(RATE, np.float32), SPEAKER, b"conditioning")
    assert files["conditioning"] == str(library.dir / "anna.pocket_tts.safetensors")
    assert await library.register_trained("anna", files, "hi") == {
        "name": "anna",
        "source": "registry",
        "model": "tiny",
    }
    voice = await library.resolve("anna", SPEAKER)
    assert voice.conditioning_model == "tiny" and voice.conditioning.read_bytes() == b"conditioning"
    assert await library.delete("Anna") == {"name": "Anna", "deleted": True}  # by any case
    assert sorted(p.name for p in library.dir.iterdir()) == []  # the files it stored went with it


async def test_deleting_an_unknown_voice_is_a_404(tmp_path, control):
    for library in (node(tmp_path, "alone"), node(tmp_path, "clustered", control)):
        with pytest.raises(APIError) as e:
            await library.delete("nobody")
        assert (e.value.status_code, e.value.param, e.value.code) == (404, "name", "voice_not_found")
        assert e.value.message == "Voice 'nobody' is not in the registry"


async def test_a_voice_deleted_through_one_node_leaves_every_node(tmp_path, control):
    a, b = node(tmp_path, "a", control), node(tmp_path, "b", control)
    await a.register_recording(speaker, "anna", WAV)
    await b.sync()
    assert await b.delete("anna") == {"name": "anna", "deleted": True}
    await a.sync()
    for library in (a, b):
        assert library.registry.data().voices == {}


async def test_a_malformed_registry_file_is_a_500_naming_it(tmp_path):
    library = node(tmp_path, "a")
    library.registry.path.parent.mkdir(parents=True)
    library.registry.path.write_text("{not json")
    with pytest.raises(APIError) as e:
        await library.resolve("anna", SPEAKER)
    assert e.value.status_code == 500 and str(library.registry.path) in e.value.message
    with pytest.raises(APIError):
        await library.register_recording(speaker, "anna", WAV)  # never overwrites it
    assert library.registry.path.read_text() == "{not json"
