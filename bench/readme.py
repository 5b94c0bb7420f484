"""Paste the latest results (bench/results/<scenario>.md tables and PNGs) into
docs/performance.md, between its `<!-- bench:<scenario> -->` and `<!-- /bench:<scenario> -->`
markers: `python -m bench.readme`. The prose around the markers is written by hand."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "performance.md"
# The scenarios are the page's own: every `<!-- bench:<scenario> -->` block it has (no second
# list of them to keep next to bench/__main__.py's).
MARKER = re.compile(r"<!-- bench:(\w+) -->")


def block(scenario: str, results: Path = RESULTS, page: Path = PAGE) -> str:
    md, js, png = (results / f"{scenario}.{ext}" for ext in ("md", "json", "png"))
    if not md.exists():
        return "_Not measured yet._"
    meta = json.loads(js.read_text())
    m = meta["machine"]
    lines = [
        f"Measured {meta['finished_at']} with `{meta['command']}` (preset `{meta['preset']}`, "
        f"{meta['duration_s']:.0f} s) on {m['cpu']}, {m['cores']} cores, "
        f"{(m['memory_bytes'] or 0) / 2**30:.0f} GiB; load average before "
        f"{meta['load_average_before'][0]:.1f}, shared machine: {m['shared']}; BLAS: {_blas(m)}.",
        "",
        md.read_text().strip(),
    ]
    if png.exists():
        # Relative to the page, so the link works wherever the repository is viewed.
        lines += ["", f"![{scenario}]({Path(os.path.relpath(png, page.parent)).as_posix()})"]
    return "\n".join(lines)


def _blas(machine: dict) -> str:
    blas = machine.get("blas")
    if not blas:
        return "the wheel's reference BLAS"
    if blas["library"] == "reference":
        return "the wheel's reference BLAS"
    threads = machine.get("blas_threads") or blas.get("threads")
    return f"OpenBLAS `{Path(blas['library']).name}`, {threads} thread(s)"


def update(text: str, results: Path = RESULTS, page: Path = PAGE) -> str:
    """`text` with every scenario's marked block replaced by its latest results."""
    for scenario in dict.fromkeys(MARKER.findall(text)):
        pattern = re.compile(rf"(<!-- bench:{scenario} -->\n).*?(<!-- /bench:{scenario} -->)", re.S)
        text = pattern.sub(lambda mt: mt.group(1) + block(scenario, results, page) + "\n" + mt.group(2), text)
    return text


def main() -> None:
    PAGE.write_text(update(PAGE.read_text()))


if __name__ == "__main__":
    main()
