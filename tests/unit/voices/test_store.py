"""The cluster's voice registry without Ray: a `VoiceStore` (what Control keeps) and two
`VoiceMirror`s in separate directories standing for two nodes with no shared disk."""

import asyncio
import json
import os

import pytest

from deployments.voices.registry import VoiceEntry, VoiceRegistry, resolve_voice
from deployments.voices.store import (
    MAX_VOICE_FILE_BYTES,
    STAGED_TTL_S,
    VoiceMirror,
    VoiceStore,
    VoiceStoreError,
    pull,
)


class Node:
    """One machine: its own registry file and voices/ directory, synced from the store."""

    def __init__(self, root, store: VoiceStore):
        self.registry = VoiceRegistry(root / "tts" / "voices.json")
        self.mirror = VoiceMirror(self.registry)
        self.store = store
        self.fetched: list[str] = []

    async def _read(self, key):
        self.fetched.append(key)
        return self.store.read_file(key)

    def sync(self) -> bool:
        return asyncio.run(pull(self.mirror, self.store.snapshot(), self._read))


def register(store: VoiceStore, name: str, audio: bytes, **fields) -> dict:
    keys = store.add_files({f"{name}.wav": audio})
    return store.put(name, {"ref_audio": keys[f"{name}.wav"], "ref_text": "", **fields})


@pytest.fixture
def store(tmp_path):
    return VoiceStore(tmp_path / "control" / "voices")


@pytest.fixture
def nodes(tmp_path, store):
    return Node(tmp_path / "node-a", store), Node(tmp_path / "node-b", store)


def test_a_voice_registered_in_the_store_reaches_every_node_with_its_own_local_paths(store, nodes):
    a, b = nodes
    snapshot = register(store, "anna", b"RIFF-anna", aliases=["ann"], language="en")
    assert snapshot["version"] == 1
    assert a.sync() and b.sync()
    for node in (a, b):
        voice = resolve_voice("ANN", node.registry.data(), presets=[])
        assert voice.name == "anna" and voice.source == "registry"
        assert voice.ref_audio.parent == node.mirror.dir  # this node's copy, not another's path
        assert voice.ref_audio.read_bytes() == b"RIFF-anna"
    # The registry file is an ordinary voices.json: what OminiX users read.
    on_disk = json.loads(b.registry.path.read_text())["voices"]["anna"]
    assert on_disk["language"] == "en" and on_disk["ref_audio"].startswith(str(b.mirror.dir))


def test_sync_is_a_no_op_until_the_version_changes_and_fetches_only_missing_files(store, nodes):
    a, _ = nodes
    register(store, "anna", b"one")
    assert a.sync()
    assert not a.sync()  # same version: nothing fetched or written
    assert len(a.fetched) == 1
    register(store, "bob", b"two")
    assert a.sync()
    assert len(a.fetched) == 2  # anna's file was already there
    assert a.mirror.manifest()["version"] == 2


def test_removing_a_voice_removes_it_and_its_file_on_every_node(store, nodes):
    a, b = nodes
    register(store, "anna", b"one")
    register(store, "bob", b"two")
    a.sync(), b.sync()
    anna_file = resolve_voice("anna", b.registry.data(), []).ref_audio
    assert store.remove("Anna")["ref_audio"].endswith("anna.wav")  # by name, case-insensitively
    assert store.remove("anna") is None
    assert a.sync() and b.sync()
    for node in (a, b):
        assert sorted(node.registry.data().voices) == ["bob"]
    assert not anna_file.exists()


def test_registering_again_replaces_the_recording_everywhere(store, nodes):
    a, b = nodes
    register(store, "anna", b"old")
    a.sync(), b.sync()
    register(store, "ANNA", b"new")  # same name, other case: one entry
    b.sync()
    voice = resolve_voice("anna", b.registry.data(), [])
    assert voice.name == "ANNA" and voice.ref_audio.read_bytes() == b"new"
    assert sorted(p.name for p in b.mirror.dir.glob("*.wav")) == [voice.ref_audio.name]  # the old copy went


def test_hand_written_entries_are_kept_and_a_hand_edit_of_a_cluster_voice_is_not_removed(store, nodes, tmp_path):
    a, _ = nodes
    mine = tmp_path / "mine.wav"
    mine.write_bytes(b"mine")
    a.registry.register("local", VoiceEntry(ref_audio=str(mine)))
    register(store, "anna", b"one")
    register(store, "bob", b"two")
    a.sync()
    assert sorted(a.registry.data().voices) == ["anna", "bob", "local"]
    # The operator points bob at their own recording; the cluster then removes both voices.
    a.registry.register("bob", VoiceEntry(ref_audio=str(mine)))
    store.remove("anna"), store.remove("bob")
    a.sync()
    assert sorted(a.registry.data().voices) == ["bob", "local"]


def test_replicas_sharing_a_directory_apply_a_version_once(tmp_path, store):
    register(store, "anna", b"one")
    first, second = Node(tmp_path / "same", store), Node(tmp_path / "same", store)
    assert first.sync()
    assert not second.sync() and second.fetched == []
    assert "anna" in second.registry.data().voices


def test_a_different_store_keeps_what_the_old_one_gave_as_local_voices(tmp_path, store, nodes):
    a, _ = nodes
    register(store, "anna", b"one")
    a.sync()
    other = VoiceStore(tmp_path / "elsewhere")  # Control came up on a node without this store
    register(other, "zoe", b"two")
    a.store = other
    assert a.sync()
    voices = a.registry.data().voices
    assert sorted(voices) == ["anna", "zoe"] and (a.mirror.dir / os.path.basename(voices["anna"].ref_audio)).exists()


def test_the_store_survives_a_restart_of_control(tmp_path, store, nodes):
    a, _ = nodes
    register(store, "anna", b"one")
    a.sync()
    restarted = VoiceStore(store.root)
    assert restarted.snapshot() == store.snapshot()
    assert restarted.read_file(restarted.snapshot()["voices"]["anna"]["ref_audio"]) == b"one"
    a.store = restarted
    assert not a.sync()  # same store, same version: the node is current


def test_oversized_files_are_refused_clearly(store):
    with pytest.raises(VoiceStoreError) as e:
        store.add_files({"big.wav": b"\0" * (MAX_VOICE_FILE_BYTES + 1)})
    assert e.value.status == 413 and e.value.code == "voice_file_too_large"
    assert "big.wav" in e.value.message and str(MAX_VOICE_FILE_BYTES) in e.value.message
    assert store.size() == 0


@pytest.mark.parametrize(
    "name, entry, field",
    [
        ("anna", {"ref_audio": "0123456789abcdef-missing.wav"}, "ref_audio"),  # never added
        ("anna", {"ref_audio": "../../etc/passwd"}, "ref_audio"),  # not a key
        ("default", {"ref_audio": "x"}, "name"),  # reserved name
        ("anna", {"ref_text": "no audio"}, "name"),  # malformed entry
    ],
)
def test_bad_registrations_are_refused_and_change_nothing(store, name, entry, field):
    with pytest.raises(VoiceStoreError) as e:
        store.put(name, entry)
    assert e.value.status == 400 and e.value.param == field
    assert store.snapshot()["version"] == 0 and store.snapshot()["voices"] == {}


def test_file_keys_cannot_reach_outside_the_store(store):
    with pytest.raises(VoiceStoreError) as e:
        store.read_file("../registry.json")
    assert e.value.status == 404
    with pytest.raises(VoiceStoreError):
        store.add_files({"../x.wav": b"1"})


def test_unreferenced_files_are_collected_after_their_time_to_live(tmp_path):
    now = [1_000_000.0]
    store = VoiceStore(tmp_path / "s", clock=lambda: now[0])
    keys = store.add_files({"staged.wav": b"s", "kept.wav": b"k"})
    for key in keys.values():  # written "now" on the fake clock
        os.utime(store.files_dir / key, (now[0], now[0]))
    store.put("kept", {"ref_audio": keys["kept.wav"]})
    now[0] += STAGED_TTL_S / 2
    store.gc()
    assert (store.files_dir / keys["staged.wav"]).exists()  # a registration may still come
    now[0] += STAGED_TTL_S
    store.gc()
    assert not (store.files_dir / keys["staged.wav"]).exists()
    assert (store.files_dir / keys["kept.wav"]).exists()


def test_a_registry_file_replaced_without_the_cluster_voices_gets_them_back(store, nodes):
    a, _ = nodes
    register(store, "anna", b"one")
    a.sync()
    a.registry.path.write_text('{"voices": {}}')  # an operator restores an old voices.json
    assert a.sync()  # same version, but the file lost anna: mirrored again
    assert resolve_voice("anna", a.registry.data(), []).ref_audio.read_bytes() == b"one"


@pytest.mark.parametrize("content", ["{not json", '{"voices": {}}', '{"store": "x", "version": 1, "voices": 3}'])
def test_an_unreadable_store_is_set_aside_and_control_starts_empty(tmp_path, content):
    root = tmp_path / "voices"
    root.mkdir()
    (root / "registry.json").write_text(content)
    store = VoiceStore(root)  # no exception: Control starts
    assert store.snapshot()["voices"] == {} and store.version == 0
    assert [p.read_text() for p in root.glob("registry.json.unreadable-*")] == [content]
