"""bench.llm_overhead's reading of py-spy's collapsed stacks (no Ray, no py-spy here)."""

from __future__ import annotations

from bench.llm_overhead import category, short, summarize

SITE = "/work/main/.venv/lib/python3.11/site-packages"


def test_frames_lose_their_install_prefix_and_get_an_owner():
    frame = f"ObjectRefGenerator._next_async ({SITE}/ray/_private/object_ref_generator.py:342)"
    assert short(frame) == "ObjectRefGenerator._next_async (ray/_private/object_ref_generator.py:342)"
    ours = "chat_events (/work/wt-overhead/deployments/ingress/serving/generation.py:114)"
    assert short(ours) == "chat_events (deployments/ingress/serving/generation.py:114)"
    assert category(short(frame)).startswith("Ray core")
    assert category("BaseModel.model_dump_json (pydantic/main.py:587)").startswith("pydantic")
    assert category("GenerationBatch._step (mlx_lm/generate.py:1434)").startswith("model step")
    assert category(short(ours)).startswith("this project")
    # No Python frame under a thread's entry: native code on that thread.
    assert category("Thread.run (threading.py:982)").startswith("native code")
    assert category("print (<builtin>)") == "other"


def test_summary_shares_count_each_sample_once(tmp_path):
    raw = tmp_path / "stacks.txt"
    raw.write_text(
        "\n".join(
            [
                # Ray's frame is the innermost with an owner: the sample is Ray's, the leaf a builtin.
                f"Thread.run (threading.py:982);f (x.py:1);g ({SITE}/ray/serve/handle.py:718);len (<builtin>) 6",
                # A recursive stack counts once per frame in the inclusive share.
                f"Thread.run (threading.py:982);h ({SITE}/pydantic/main.py:1);h ({SITE}/pydantic/main.py:1) 3",
                "Thread.run (threading.py:982) 1",
            ]
        )
        + "\n"
    )
    text = summarize(raw, "ingress")
    assert "10 samples" in text
    by_owner = text.split("### by what")[1].split("###")[0]
    assert " 60.0%  Serve handle, router, replica (ray.serve)" in by_owner
    assert " 30.0%  pydantic (validation, dump)" in by_owner
    assert " 10.0%  native code on Ray's and pool threads" in by_owner
    inclusive = text.split("### frames by inclusive share")[1]
    assert "100.0%  Thread.run (threading.py:982)" in inclusive
    assert " 30.0%  h (pydantic/main.py:1)" in inclusive
    leaves = text.split("### leaf frames")[1].split("###")[0]
    assert " 60.0%  len (<builtin>)" in leaves
