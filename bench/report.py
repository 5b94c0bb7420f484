"""Where results go: JSON with the machine's description, a printed table, a PNG plot."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Optional

from bench.stats import rounded
from deployments import blas


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def machine() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_bytes": _memory_bytes(),
        "python": sys.version.split()[0],
        "versions": {d: _version(d) for d in ("mlx", "mlx-lm", "mlx-audio", "ray", "ominix-serve")},
        "blas": blas.select().as_dict(),
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "load_average_at_end": list(load) if load else None,
        # The development machine runs other engineers' test suites at the same time.
        "shared": os.environ.get("BENCH_MACHINE_SHARED", "1") not in ("0", "false", "no"),
    }


def write_result(out_dir: Path, scenario: str, result: dict) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{scenario}.json"
    body = {
        "scenario": scenario,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        **rounded(result),
    }
    path.write_text(json.dumps(body, indent=2) + "\n")
    return path


def progress(message: str) -> None:
    """A scenario's progress line, timestamped."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def run_standalone(
    module: str, argv: Optional[Sequence[str]], measure: Callable[[Callable[[str], None]], dict]
) -> dict:
    """`measure(progress)` as `python -m <module>` runs it alone: its result with the command,
    the duration and the load average before (what a scenario's JSON records too)."""
    load = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    t0 = time.perf_counter()
    result = measure(progress)
    return {
        "preset": "custom",
        "command": " ".join([f"python -m {module}", *(sys.argv[1:] if argv is None else argv)]),
        "duration_s": time.perf_counter() - t0,
        "load_average_before": load,
        **result,
    }


def run_alone(
    module: Any,
    scenario: str,
    measure: Callable[[Callable[[str], None], Path], Awaitable[dict]],
    out_dir: Path,
    argv: Optional[Sequence[str]] = None,
    preset: str = "custom",
) -> int:
    """What `python -m bench.<scenario>` does run alone: `measure(progress, work)` timed (`work`
    a scratch directory for peers' logs, kept when the run fails: the peer's error names its
    log), its result wrapped as `python -m bench` wraps one, then <scenario>.json, .md and .png
    written by the scenario's `module` (its `render` and `plot`)."""
    import asyncio
    import shutil
    import tempfile

    work = Path(tempfile.mkdtemp(prefix=f"ominix-{scenario}-"))
    result = run_standalone(f"bench.{scenario}", argv, lambda say: asyncio.run(measure(say, work)))
    shutil.rmtree(work, ignore_errors=True)
    result["preset"] = preset
    save_standalone(out_dir, scenario, result, module.render(result))
    module.plot(result, out_dir / f"{scenario}.png")
    return 0


def save_standalone(out_dir: Path, scenario: str, result: dict, rendered: str) -> Path:
    """What `python -m bench.<scenario>` run alone leaves: <scenario>.json and .md, printed."""
    path = write_result(out_dir, scenario, result)
    (out_dir / f"{scenario}.md").write_text(rendered + "\n")
    print(f"{rendered}\n\n{path}")
    return path


def table(headers: Sequence[str], rows: Sequence[Sequence]) -> str:
    """A GitHub-markdown table (prints readably in a terminal too)."""

    def cell(v) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def pyplot():
    """matplotlib without a display; None when the bench extra is not installed."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plots", file=sys.stderr)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def percentile_bars(ax, results: dict, p50_key: str, p95_key: str, title: str) -> None:
    """Side-by-side p50/p95 bars, one pair per system or mode in `results`."""
    names = list(results)
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], [results[n][p50_key] for n in names], width=0.4, label="p50")
    ax.bar([i + 0.2 for i in x], [results[n][p95_key] for n in names], width=0.4, label="p95")
    ax.set_xticks(list(x), names)
    ax.set_title(title)
    ax.legend()


def saved(plt, fig, path: Path, dpi: Optional[int] = None) -> Path:
    """`fig` laid out, written to `path` and closed (every scenario's plot ends so)."""
    fig.tight_layout()
    fig.savefig(path, **({"dpi": dpi} if dpi else {}))
    plt.close(fig)
    return path
