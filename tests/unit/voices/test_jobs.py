"""Training jobs as records (pure): progress through the stages, the event and status shapes,
the state file across a restart."""

from deployments.voices.jobs import STAGES, JobStore, TrainingJob


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


def test_the_state_file_keeps_finished_jobs_and_fails_interrupted_ones(tmp_path):
    store = JobStore(tmp_path / "jobs.json")
    done, running = TrainingJob(voice_name="a"), TrainingJob(voice_name="b")
    store.add(done)
    store.update(done, status="complete")
    store.add(running)
    store.update(running, status="voice_conditioning")
    again = JobStore(tmp_path / "jobs.json")
    assert again.jobs[done.task_id].status_body()["completed_at"] == done.completed_at
    interrupted = again.jobs[running.task_id].status_body()
    assert interrupted["status"] == "failed" and "restarted" in interrupted["error"]
    assert again.active() is None


def test_an_unreadable_state_file_starts_empty(tmp_path):
    (tmp_path / "jobs.json").write_text("{not json")
    assert JobStore(tmp_path / "jobs.json").jobs == {}
