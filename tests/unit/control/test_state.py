"""The control plane's state: desired state per slot with epochs, replica reports, whether a
change has reached every replica, and the state file a restarted Control replica reads."""

from __future__ import annotations

from deployments.control.deployment import state_file
from deployments.control.state import LOADED, STALE_AFTER_S, UNLOADED, ControlState, ReplicaReport


def report(replica, epoch, slot="llm", model="a", now=100.0):
    return ReplicaReport(slot=slot, replica_id=replica, epoch=epoch, default_model=model), now


def test_each_change_gets_a_new_epoch_and_unload_keeps_the_last_model():
    state = ControlState({"llm": "a", "tts": "t"})
    assert state.desired["llm"].epoch == 0 and state.desired["llm"].model == "a"
    loaded = state.set("llm", LOADED, "b")
    assert (loaded.epoch, loaded.model) == (1, "b")
    unloaded = state.set("llm", UNLOADED, None)
    assert (unloaded.epoch, unloaded.state, unloaded.model) == (2, UNLOADED, "b")
    assert state.desired["tts"].epoch == 0  # slots are independent


def test_applied_waits_for_every_running_replica_and_forgets_silent_ones():
    state = ControlState({"llm": "a"})
    state.report(*report("r1", 1))
    assert not state.applied("llm", 1, expected_replicas=2, now=101)
    state.report(*report("r2", 1))
    assert state.applied("llm", 1, expected_replicas=2, now=101)
    assert not state.applied("llm", 2, expected_replicas=2, now=101)
    later = 100 + STALE_AFTER_S + 1
    assert state.replicas("llm", now=later) == []  # a replica not heard from is gone


def test_a_restarted_control_replica_restores_its_own_state(tmp_path):
    path = tmp_path / "state.json"
    first = ControlState({"llm": "a", "asr": "w"}, path)
    first.set("llm", LOADED, "b")
    first.set("asr", UNLOADED, None)
    again = ControlState({"llm": "a", "asr": "w"}, path)
    assert again.desired["llm"].model == "b" and again.desired["llm"].epoch == 1
    assert again.desired["asr"].state == UNLOADED
    # A slot no longer configured is ignored; a configured one not in the file keeps its default.
    narrower = ControlState({"llm": "a", "image": "i"}, path)
    assert set(narrower.desired) == {"llm", "image"} and narrower.desired["image"].model == "i"


def test_a_corrupt_state_file_starts_from_the_config(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("{not json")
    assert ControlState({"llm": "a"}, path).desired["llm"].model == "a"


def test_state_files_are_per_application_and_per_build(tmp_path):
    """Apps share a Ray cluster: one app's unload must not empty another's slots (found by the
    benchmark: a memory run's final unload left the next app's TTS slot unloaded)."""
    a1 = state_file(tmp_path, "ominix", "build1")
    assert a1 == state_file(tmp_path, "ominix", "build1")  # a Control restart finds it again
    assert a1 != state_file(tmp_path, "bench-tts", "build1")
    assert a1 != state_file(tmp_path, "ominix", "build2")  # a redeploy starts from its config
    assert state_file(tmp_path, "../evil", "b").parent == tmp_path
    first = ControlState({"tts": "t"}, state_file(tmp_path, "memory-bench", "b1"))
    first.set("tts", UNLOADED, None)
    other = ControlState({"tts": "t"}, state_file(tmp_path, "tts-bench", "b2"))
    assert other.desired["tts"].state == LOADED


def test_keep_alive_is_kept_per_model_across_loads_and_restarts(tmp_path):
    path = tmp_path / "state.json"
    state = ControlState({"llm": "a"}, path)
    first = state.set_keep_alive("llm", "b", 3.0)
    assert first.keep_alive == {"b": 3.0} and first.keep_alive_version == 1 and first.epoch == 0
    assert state.set_keep_alive("llm", "b", 3.0).keep_alive_version == 1  # unchanged: no news
    assert state.set_keep_alive("llm", None, -1.0).keep_alive == {"b": 3.0, "a": -1.0}  # None: the default
    assert state.set("llm", LOADED, "b").keep_alive == {"b": 3.0, "a": -1.0}  # an operator's load keeps them
    assert ControlState({"llm": "a"}, path).desired["llm"].keep_alive == {"b": 3.0, "a": -1.0}
    state.set("llm", UNLOADED, None)
    assert state.set_keep_alive("llm", None, 0.0) is None  # nothing is the default while unloaded
    assert state.set_keep_alive("tts", "t", 0.0) is None  # not a slot of this graph


def test_with_serve_states_only_replicas_serve_still_has_are_listed_with_their_state():
    """A killed replica's last report stays fresh for STALE_AFTER_S; Serve's view drops it and
    says whether a replica is running or still starting (bench/restart.py measured /readyz
    answering ready on a dead replica's report while its replacement loaded)."""
    state = ControlState({"llm": "a"})
    state.report(*report("dead", 0))
    state.report(*report("new", 0))
    assert [r.replica_id for r in state.replicas("llm", now=101)] == ["dead", "new"]  # Serve unknown
    listed = state.replicas("llm", now=101, serve_states={"new": "STARTING", "other": "RUNNING"})
    assert [(r.replica_id, r.serve_state) for r in listed] == [("new", "STARTING")]
    assert state.reports["new"].serve_state is None  # the stored report is left as the replica sent it
