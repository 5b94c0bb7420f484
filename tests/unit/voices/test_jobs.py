"""Training jobs as records (pure): progress through the stages, the event and status shapes,
and the jobs kept in the graph's record store: across a restart, from another replica (reads,
cancels, the one training slot), a dead owner's job failed."""

import pytest

from deployments.ingress.serving.records import LocalRecords
from deployments.records import RecordStore
from deployments.voices.jobs import STAGES, JobStore, TrainingInterrupted, TrainingJob


def test_progress_follows_the_stages():
    job = TrainingJob(voice_name="v")
    assert job.task_id.startswith("train-") and job.progress == 0.0 and not job.is_complete
    values = []
    for stage in STAGES:
        job.status = stage
        values.append(job.progress)
    assert values == sorted(values) and values[-1] < 1.0
    job.status = "complete"
    assert job.progress == 1.0 and job.is_complete
    assert set(job.event()) == {"task_id", "stage", "progress", "stage_progress", "message", "is_complete"}


def test_style_fitting_is_the_training_stage_and_its_losses_are_in_the_events():
    job = TrainingJob(voice_name="v", status="style_fitting", stage_progress=0.5)
    assert job.progress == TrainingJob(voice_name="v", status="voice_conditioning", stage_progress=0.5).progress
    assert 0.5 < job.progress < 1.0
    job.losses.append({"step": 0, "loss": 0.25})
    job.fit = {"similarity": 0.8}
    assert job.event()["losses"] == [{"step": 0, "loss": 0.25}] and job.event()["fit"] == {"similarity": 0.8}
    assert job.status_body()["fit"] == {"similarity": 0.8} and "losses" not in job.status_body()


class Shared(LocalRecords):
    """One store that several processes (JobStores) write, as Control's is."""

    shared = True


async def test_the_state_file_keeps_finished_jobs_and_fails_interrupted_ones(tmp_path):
    store = JobStore(LocalRecords.in_dir(tmp_path))
    done, running = TrainingJob(voice_name="a"), TrainingJob(voice_name="b")
    assert await store.add(done)
    await store.update(done, status="complete")
    assert await store.add(running)
    await store.update(running, status="voice_conditioning")
    again = JobStore(LocalRecords.in_dir(tmp_path))  # a new process on the same private file
    assert (await again.get(done.task_id)).status_body()["completed_at"] == done.completed_at
    interrupted = (await again.get(running.task_id)).status_body()
    assert interrupted["status"] == "failed" and "restarted" in interrupted["error"]
    assert await again.active() is None


async def test_an_unreadable_state_file_starts_empty(tmp_path):
    (tmp_path / "records.sqlite3").write_bytes(b"{not json" * 200)
    assert await JobStore(LocalRecords.in_dir(tmp_path)).get("train-x") is None


async def test_replicas_share_the_jobs_and_the_one_training_slot():
    records = Shared(RecordStore())
    a, b = JobStore(records), JobStore(records)
    job = TrainingJob(voice_name="v")
    assert await a.add(job)
    assert not await b.add(TrainingJob(voice_name="w"))  # one job at a time, graph-wide
    await a.update(job, status="audio_slicing")
    seen = await b.get(job.task_id)
    assert seen.status == "audio_slicing" and seen.version == job.version  # alive: heartbeat fresh
    assert (await b.active()).task_id == job.task_id
    await a.update(job, status="complete")
    assert await b.active() is None and await b.add(TrainingJob(voice_name="w"))


async def test_a_cancel_from_another_replica_stops_the_owner_at_its_next_write():
    records = Shared(RecordStore())
    owner, other = JobStore(records), JobStore(records)
    job = TrainingJob(voice_name="v")
    await owner.add(job)
    cancelled = await other.cancel_elsewhere(await other.get(job.task_id))
    assert cancelled.status == "cancelled"
    with pytest.raises(TrainingInterrupted):
        await owner.update(job, status="denoising")
    assert job.status == "cancelled" and (await other.get(job.task_id)).status == "cancelled"


async def test_the_owner_sees_a_cancel_sent_elsewhere_at_its_heartbeat_or_a_read():
    records = Shared(RecordStore())
    owner, other = JobStore(records), JobStore(records)
    beat = TrainingJob(voice_name="v")
    assert await owner.add(beat)
    await other.cancel_elsewhere(await other.get(beat.task_id))
    with pytest.raises(TrainingInterrupted):
        await owner.heartbeat(beat)
    read = TrainingJob(voice_name="w")
    assert await owner.add(read)  # a cancelled job frees the slot
    await other.cancel_elsewhere(await other.get(read.task_id))
    assert (await owner.get(read.task_id)).status == "cancelled" and read.is_complete
