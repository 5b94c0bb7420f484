"""bench/readme.py: `python -m bench.readme` pastes bench/results into docs/performance.md's
marked blocks and leaves the hand-written prose around them alone."""

from __future__ import annotations

import shutil

from bench import readme


def test_bench_readme_fills_the_marked_blocks_from_results(tmp_path):
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    for ext in ("md", "json", "png"):
        shutil.copy(readme.RESULTS / f"tts.{ext}", results / f"tts.{ext}")
    page = tmp_path / "docs" / "performance.md"
    text = "intro\n<!-- bench:tts -->\nold\n<!-- /bench:tts -->\n<!-- bench:asr -->\nold\n<!-- /bench:asr -->\nend\n"
    out = readme.update(text, results, page)
    tts = out.split("<!-- bench:tts -->\n")[1].split("<!-- /bench:tts -->")[0]
    assert tts.startswith("Measured ") and (results / "tts.md").read_text().strip() in tts
    assert "![tts](../bench/results/tts.png)" in tts
    assert "<!-- bench:asr -->\n_Not measured yet._\n<!-- /bench:asr -->" in out
    assert out.startswith("intro\n") and out.endswith("end\n")
