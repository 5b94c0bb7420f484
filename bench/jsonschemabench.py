"""JSONSchemaBench (guidance-ai/jsonschemabench; Geng et al. 2025) on the graph: a sample of its
real schemas from every category, each sent as a strict `json_schema` response_format to the
default LLM (SmolLM2-135M-Instruct) over HTTP, as a client sends it; every answer judged apart
from the server's own check; beside it, what llguidance alone compiles of the same schemas.

`python -m bench --scenarios jsonschemabench --data DIR [--schemas 300]`; DIR is a local clone
of the benchmark (its `data/<category>/*.json`). The data is not part of this repository, and never
committed: only the results (bench/results/jsonschemabench.json and .md).

- The sample: `--schemas` schemas, each category's share of the benchmark (at least
  `MIN_PER_CATEGORY` from each), drawn with a fixed seed from the sorted file names: the same
  sample every run.
- The request: the schema in the prompt (its first `PROMPT_SCHEMA_CHARS` characters, as the
  benchmark's own harness puts it there), temperature 0 (the check's retries sample at a small
  one), `MAX_TOKENS`, `CONCURRENCY` requests at a time.
- An answer is judged as a client would: the whole of it parsed (`json.loads`, no key written
  twice), validated in its schema's draft with every format jsonschema knows. Outcomes: `valid`;
  `invalid` (finished but fails: never expected); `cut` (finish_reason length); `not_met`
  (finish_reason schema_not_met: every attempt failed, nothing returned); `refused` (a 4xx);
  `error` (a 5xx or a broken stream). Coverage: valid or cut, over the whole sample.
- llguidance alone: the schema as sent, compiled by llguidance with its defaults (no lenient
  mode, no rewrite), as a server that hands schemas straight to it would; what compiles is what
  it enforces exactly, the rest it declines.
- The check's own counts (answers resampled, not met) come from the ingress's metrics.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Optional

from bench.report import pyplot, saved, table

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_SEED = 40  # the number: any fixed seed gives a fixed sample
DEFAULT_SCHEMAS = 300
MIN_PER_CATEGORY = 10
MAX_TOKENS = 512
CONCURRENCY = 8
PROMPT_SCHEMA_CHARS = 1500
OUTCOMES = ("valid", "cut", "not_met", "invalid", "refused", "error")

# The keywords a schema's per-keyword row counts it under (anywhere in it), and formats by name.
KEYWORDS = (
    "oneOf",
    "anyOf",
    "allOf",
    "not",
    "if",
    "uniqueItems",
    "dependencies",
    "dependentRequired",
    "dependentSchemas",
    "contains",
    "propertyNames",
    "patternProperties",
    "minProperties",
    "maxProperties",
    "$ref",
    "enum",
    "const",
    "pattern",
    "format",
    "prefixItems",
    "multipleOf",
)
# Where a schema holds other schemas: one, a list of them, a map of names to them (for
# `dependencies` the map's values may be name lists, which hold none).
_SUBSCHEMA = (
    "items",
    "additionalItems",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
)
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "definitions", "$defs", "dependentSchemas", "dependencies")


# ---------------------------------------------------------------------------------------------
# The sample


def categories(data: Path) -> dict[str, list[Path]]:
    """The benchmark's categories (data/<category>/*.json), each file list sorted."""
    root = data / "data" if (data / "data").is_dir() else data
    found = {d.name: sorted(d.glob("*.json")) for d in sorted(root.iterdir()) if d.is_dir()}
    found = {name: files for name, files in found.items() if files}
    if not found:
        raise SystemExit(f"no JSONSchemaBench categories under {root} (expected data/<category>/*.json)")
    return found


def allocate(sizes: dict[str, int], total: int, least: int = MIN_PER_CATEGORY) -> dict[str, int]:
    """Schemas per category: its share of `total` by size, at least `least` (or all it has)."""
    whole = sum(sizes.values())
    return {name: min(size, max(least, round(total * size / whole))) for name, size in sizes.items()}


def sample(data: Path, total: int, seed: int = SAMPLE_SEED) -> list[tuple[str, Path]]:
    files = categories(data)
    counts = allocate({name: len(paths) for name, paths in files.items()}, total)
    rng = random.Random(seed)
    return [(name, path) for name, paths in files.items() for path in sorted(rng.sample(paths, counts[name]))]


def keywords(schema: Any) -> set[str]:
    """The KEYWORDS a schema uses in any of its (sub)schemas (formats also as `format:<name>`),
    plus `required-not-in-properties` for an object that requires a name it does not list. Only
    schema positions are read: a property named `not`, an enum value holding `if`, Snowplow's
    `self` object with its `format` are no keywords."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if not isinstance(node, dict):
            return
        found.update(key for key in node if key in KEYWORDS)
        if isinstance(node.get("format"), str):
            found.add(f"format:{node['format']}")
        listed = node.get("properties") if isinstance(node.get("properties"), dict) else None
        required = node.get("required") if isinstance(node.get("required"), list) else []
        if listed is not None and any(isinstance(n, str) and n not in listed for n in required):
            found.add("required-not-in-properties")
        for key in _SUBSCHEMA:
            walk(node.get(key))
        for key in _SUBSCHEMA_LISTS:
            for sub in node.get(key) if isinstance(node.get(key), list) else ():
                walk(sub)
        for key in _SUBSCHEMA_MAPS:
            for sub in node.get(key).values() if isinstance(node.get(key), dict) else ():
                walk(sub)

    walk(schema)
    return found


def llguidance_alone(schema: Any) -> Optional[str]:
    """None when llguidance compiles the schema as sent with its default options, else its error."""
    import llguidance

    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema)
    except Exception as e:
        return str(e)
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, None)
    return messages[0] if is_error else None


# ---------------------------------------------------------------------------------------------
# One schema


def request_body(schema: Any) -> dict:
    text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))[:PROMPT_SCHEMA_CHARS]
    return {
        "messages": [
            {
                "role": "user",
                "content": f"Give one example of a JSON document that follows this JSON Schema:\n{text}",
            }
        ],
        "temperature": 0,
        "max_tokens": MAX_TOKENS,
        "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}},
    }


def judge(text: Optional[str], schema: Any) -> Optional[str]:
    """None when the whole answer is JSON that validates against the schema in its own draft (every
    format jsonschema knows asserted, no key written twice), else why not."""
    import jsonschema

    def unique(pairs):
        keys = [k for k, _ in pairs]
        if len(keys) != len(set(keys)):
            raise ValueError("a key written twice")
        return dict(pairs)

    try:
        value = json.loads(text or "", object_pairs_hook=unique)
    except ValueError as e:
        return f"not JSON: {e}"
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        error = jsonschema.exceptions.best_match(
            cls(schema, format_checker=jsonschema.FormatChecker()).iter_errors(value)
        )
    except Exception as e:  # the validator cannot read the schema
        return f"unjudgeable: {type(e).__name__}: {e}"
    return None if error is None else error.message[:200]


def outcome(status: int, answer: Optional[dict], schema: Any) -> tuple[str, Optional[str]]:
    """(one of OUTCOMES, a detail) for a response's status and JSON body."""
    if status >= 500 or answer is None:
        return "error", None if answer is None else json.dumps(answer)[:200]
    if status >= 400:
        return "refused", (answer.get("error") or {}).get("message", "")[:200]
    choice = answer["choices"][0]
    finish, text = choice["finish_reason"], choice["message"].get("content")
    if finish == "length":
        return "cut", None
    if finish == "schema_not_met":
        return ("not_met", None) if not text else ("invalid", "schema_not_met with text")
    problem = judge(text, schema)
    return ("valid", None) if problem is None else ("invalid", problem)


async def ask(http, url: str, category: str, path: Path, limit: asyncio.Semaphore) -> dict:
    schema = json.loads(path.read_text())
    row: dict[str, Any] = {
        "category": category,
        "file": path.name,
        "keywords": sorted(keywords(schema)),
        "llguidance_alone": llguidance_alone(schema),
    }
    async with limit:
        t0 = time.perf_counter()
        try:
            r = await http.post(f"{url}/v1/chat/completions", json=request_body(schema))
            status, answer = r.status_code, r.json()
        except Exception as e:  # a dropped connection, a body that is not JSON
            status, answer = 599, {"error": {"message": f"{type(e).__name__}: {e}"}}
        row["seconds"] = time.perf_counter() - t0
    row["status"] = status
    row["outcome"], row["detail"] = outcome(status, answer if status < 599 else None, schema)
    usage = (answer or {}).get("usage") or {}
    row["completion_tokens"] = usage.get("completion_tokens")
    return row


# ---------------------------------------------------------------------------------------------
# The run


async def measure(url: str, data: Path, total: int, progress) -> dict:
    import httpx

    chosen = sample(data, total)
    progress(f"jsonschemabench: {len(chosen)} schemas from {len({c for c, _ in chosen})} categories")
    limit = asyncio.Semaphore(CONCURRENCY)
    async with httpx.AsyncClient(timeout=httpx.Timeout(1800)) as http:
        before = (await http.get(f"{url}/metrics", params={"format": "json"})).json()["ingress"]
        t0 = time.perf_counter()
        rows: list[dict] = []

        async def one(category: str, path: Path) -> None:
            row = await ask(http, url, category, path, limit)
            rows.append(row)
            if len(rows) % 25 == 0:
                progress(f"jsonschemabench: {len(rows)}/{len(chosen)} ({summary(rows)['coverage']:.3f} covered)")

        await asyncio.gather(*(one(c, p) for c, p in chosen))
        wall = time.perf_counter() - t0
        after = (await http.get(f"{url}/metrics", params={"format": "json"})).json()["ingress"]
    rows.sort(key=lambda r: (r["category"], r["file"]))
    return {
        "sample": {"schemas": len(rows), "seed": SAMPLE_SEED, "min_per_category": MIN_PER_CATEGORY},
        "request": {"temperature": 0, "max_tokens": MAX_TOKENS, "concurrency": CONCURRENCY},
        "wall_s": wall,
        "checks": checks_between(before, after),
        "overall": summary(rows),
        "by_category": {
            c: summary([r for r in rows if r["category"] == c]) for c in sorted({r["category"] for r in rows})
        },
        "by_keyword": by_keyword(rows),
        "rows": rows,
    }


def checks_between(before: dict, after: dict) -> dict[str, int]:
    """The ingress's schema checks during the run, every model's summed, by result."""

    def total(summary: dict) -> Counter:
        counts: Counter = Counter()
        for by_result in (summary.get("schema_checks") or {}).values():
            counts.update(by_result)
        return counts

    return dict(total(after) - total(before))


def summary(rows: list[dict]) -> dict:
    counts = Counter(r["outcome"] for r in rows)
    n = len(rows)
    alone = sum(r["llguidance_alone"] is None for r in rows)
    return {
        "schemas": n,
        **{o: counts.get(o, 0) for o in OUTCOMES},
        "coverage": (counts["valid"] + counts["cut"]) / n if n else 0.0,
        "llguidance_alone_compiles": alone / n if n else 0.0,
    }


def by_keyword(rows: list[dict]) -> dict[str, dict]:
    """The summary of the schemas using each keyword (formats grouped as `format:*` plus those
    used by three schemas or more)."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        for keyword in row["keywords"]:
            groups[keyword].append(row)
        if any(k.startswith("format:") for k in row["keywords"]):
            groups["format:*"].append(row)
    keep = [k for k in groups if not k.startswith("format:") or k == "format:*" or len(groups[k]) >= 3]
    return {k: summary(groups[k]) for k in sorted(keep)}


# ---------------------------------------------------------------------------------------------
# Reports


def _row(name: str, s: dict) -> list:
    return [
        name,
        s["schemas"],
        f"{s['llguidance_alone_compiles']:.2f}",
        s["valid"],
        s["cut"],
        s["not_met"],
        s["refused"],
        s["invalid"],
        s["error"],
        f"{s['coverage']:.3f}",
    ]


HEADERS = [
    "",
    "schemas",
    "llguidance alone: compiles",
    "valid",
    "cut (length)",
    "not met",
    "refused (400)",
    "invalid",
    "5xx",
    "coverage (valid or cut)",
]


def render(result: dict) -> str:
    overall = result["overall"]
    parts = [
        table(HEADERS, [_row("all", overall)] + [_row(c, s) for c, s in result["by_category"].items()]),
        table(["keyword", *HEADERS[1:]], [_row(f"`{k}`", s) for k, s in result["by_keyword"].items()]),
    ]
    checks = result.get("checks") or {}
    refusals = Counter(
        (r["detail"] or "").split(": ", 2)[-1][:70] for r in result["rows"] if r["outcome"] == "refused"
    ).most_common()
    notes = [
        f"{overall['schemas']} JSONSchemaBench schemas (each category's share, at least "
        f"{result['sample']['min_per_category']} each, seed {result['sample']['seed']}) sent as strict `json_schema` "
        f"to the default LLM over HTTP, temperature 0, max_tokens {result['request']['max_tokens']}, "
        f"{result['request']['concurrency']} at a time ({result['wall_s']:.0f} s). Coverage: valid or cut by "
        "max_tokens, over every schema of the row. llguidance alone: the schema as sent compiled by llguidance "
        "with its defaults (what a server that hands it schemas enforces; the rest it declines). Each answer is "
        "judged apart from the server's check: parsed whole, validated in its schema's draft with every format "
        "jsonschema knows.",
        "The check (ingress metrics over the run): "
        + ", ".join(f"{k} {v}" for k, v in sorted(checks.items()))
        + " (`resampled`: answers that failed their schema and were generated again).",
    ]
    if refusals:
        notes.append("Refused: " + "; ".join(f"{n} × {why}" for why, n in refusals) + ".")
    return "\n\n".join(parts + notes)


def plot(result: dict, path: Path) -> Optional[Path]:
    plt = pyplot()
    if plt is None:
        return None
    names = list(result["by_category"])
    fig, ax = plt.subplots(figsize=(9, 3.8))
    bottom = [0.0] * len(names)
    for outcome_name in OUTCOMES:
        shares = [result["by_category"][c][outcome_name] / result["by_category"][c]["schemas"] for c in names]
        ax.bar(names, shares, bottom=bottom, label=outcome_name)
        bottom = [b + s for b, s in zip(bottom, shares)]
    alone = [result["by_category"][c]["llguidance_alone_compiles"] for c in names]
    ax.plot(names, alone, "k_", markersize=18, markeredgewidth=2, label="llguidance alone compiles")
    ax.set_ylabel("share of the category's schemas")
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    ax.legend(fontsize=7, loc="lower left")
    return saved(plt, fig, path)


async def run(cluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    """The scenario in `python -m bench`: the graph with its LLM slot only, on the shipped defaults."""
    from bench.cluster import wait_ready

    if not getattr(opts, "data", None):
        raise SystemExit("jsonschemabench needs --data DIR, a local clone of guidance-ai/jsonschemabench")
    url = cluster.deploy("bench-jsonschemabench", {"llm": {}})
    try:
        await wait_ready(url)
        return await measure(url, Path(opts.data), opts.schemas, progress)
    finally:
        cluster.delete("bench-jsonschemabench")
