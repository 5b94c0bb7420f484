"""Paste the latest results (bench/results/<scenario>.md tables and PNGs) into the README's
Performance section, between its `<!-- bench:<scenario> -->` and `<!-- /bench:<scenario> -->`
markers: `python -m bench.readme`."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def block(scenario: str) -> str:
    md, js, png = (RESULTS / f"{scenario}.{ext}" for ext in ("md", "json", "png"))
    if not md.exists():
        return "_Not measured yet._"
    meta = json.loads(js.read_text())
    m = meta["machine"]
    lines = [f"Measured {meta['finished_at']} with `{meta['command']}` (preset `{meta['preset']}`, "
             f"{meta['duration_s']:.0f} s) on {m['cpu']}, {m['cores']} cores, "
             f"{(m['memory_bytes'] or 0) / 2**30:.0f} GiB; load average before "
             f"{meta['load_average_before'][0]:.1f}, shared machine: {m['shared']}; BLAS: {_blas(m)}.", "",
             md.read_text().strip()]
    if png.exists():
        lines += ["", f"![{scenario}](bench/results/{scenario}.png)"]
    return "\n".join(lines)


def _blas(machine: dict) -> str:
    blas = machine.get("blas")
    if not blas:
        return "the wheel's reference BLAS"
    if blas["library"] == "reference":
        return "the wheel's reference BLAS"
    threads = machine.get("blas_threads") or blas.get("threads")
    return f"OpenBLAS `{Path(blas['library']).name}`, {threads} thread(s)"


def main() -> None:
    readme = ROOT / "README.md"
    text = readme.read_text()
    for scenario in ("llm", "asr", "tts", "memory", "prefix"):
        pattern = re.compile(rf"(<!-- bench:{scenario} -->\n).*?(<!-- /bench:{scenario} -->)", re.S)
        text = pattern.sub(lambda mt: mt.group(1) + block(scenario) + "\n" + mt.group(2), text)
    readme.write_text(text)


if __name__ == "__main__":
    main()
