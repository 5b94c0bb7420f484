"""The documentation stays true to the repository: README.md is short, every relative link in
README.md and docs/ points at a file (and heading) that exists, every route an example names
(`POST /v1/audio/speech`, a route-table row, a curl command) is a route of the FastAPI app, and
docs/performance.md carries the latest bench/results. No Ray: the app is only built, never run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache, lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 200

# Pages other branches are writing now, linked already under their final names. The lead
# empties this list at merge (test_missing_pages_are_only_the_expected_ones then insists).
PAGES_NOT_WRITTEN_YET: set[str] = set()  # pages linked before they land (empty at merge)

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
METHOD = r"(?:GET|POST|PUT|PATCH|DELETE|HEAD|WS)"  # WS names a WebSocket route
# `POST /v1/audio/speech` in prose or code.
ROUTE_MENTION = re.compile(rf"(?<![\w/])({METHOD}) +(/[^\s`'\")\]|,;]*)")
# A route-table row: | GET, POST | `/v1/voices` | ...
TABLE_ROW = re.compile(rf"^\|\s*({METHOD}(?:\s*,\s*{METHOD})*)\s*\|([^|]*)\|")
SERVER_URL = re.compile(r"(?:https?|wss?)://(?:127\.0\.0\.1|localhost):8080(/[^\s'\"?`)]*)")
PLACEHOLDER = re.compile(r"\{[^}/]+\}")


def doc_files() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def split_code(text: str) -> tuple[list[str], list[str]]:
    """(prose lines, code-block lines) of a Markdown text."""
    prose, code, in_code = [], [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            in_code = not in_code
            continue
        (code if in_code else prose).append(line)
    return prose, code


# ---------------------------------------------------------------------------------------------
# README length


def test_readme_is_at_most_200_lines():
    lines = README.read_text().count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move detail into docs/"


# ---------------------------------------------------------------------------------------------
# Links


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    prose, _ = split_code(path.read_text())
    seen: dict[str, int] = {}
    out = set()
    for line in prose:
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = github_anchor(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


def relative_links(path: Path) -> Iterator[str]:
    prose, _ = split_code(path.read_text())
    for line in prose:
        for target in LINK.findall(line):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                yield target


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        name = dest.relative_to(ROOT).as_posix() if dest.is_relative_to(ROOT) else str(dest)
        if not dest.exists():
            if name not in PAGES_NOT_WRITTEN_YET:
                broken.append(f"{target} (no file {name})")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {name})")
    return broken


@pytest.mark.parametrize("path", doc_files(), ids=rel)
def test_relative_links_point_at_existing_files_and_headings(path):
    assert broken_links(path) == []


def test_missing_pages_are_only_the_expected_ones():
    """The allow-list only names pages that are still missing: it shrinks as they land."""
    written = sorted(p for p in PAGES_NOT_WRITTEN_YET if (ROOT / p).exists())
    assert written == [], f"remove from PAGES_NOT_WRITTEN_YET: {written}"


def test_the_link_checker_catches_a_broken_link_and_anchor(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## A section (`x.toml`)\n")
    page.write_text(
        "# Page\n\n[ok](other.md#a-section-xtoml) [gone](nope.md) [bad anchor](other.md#missing)\n"
        "[web](https://example.com/x.md) [self](#page)\n\n```\n[in code](ignored.md)\n```\n"
    )
    assert broken_links(page) == [
        "nope.md (no file docs/nope.md)",
        "other.md#missing (no heading #missing in docs/other.md)",
    ]


# ---------------------------------------------------------------------------------------------
# Routes in examples


@lru_cache(maxsize=1)
def app():
    from deployments.ingress.app import create_app
    from deployments.ingress.catalog import ModelCatalog
    from deployments.ingress.state import IngressState

    return create_app(IngressState(catalog=ModelCatalog()))


def is_route(method: str, path: str) -> bool:
    """Whether the app has `path` for `method` (WS: a WebSocket route), by Starlette's matching."""
    from starlette.routing import Match

    websocket = method == "WS"
    scope = {
        "type": "websocket" if websocket else "http",
        "path": path,
        "root_path": "",
        "method": "GET" if websocket else method,
        "headers": [],
        "query_string": b"",
    }
    return any(route.matches(scope)[0] == Match.FULL for route in app().routes)


def curl_commands(code_lines: list[str]) -> Iterator[str]:
    """Each curl command of the code blocks, its continuation lines joined."""
    joined, current = [], ""
    for line in code_lines:
        current += line.rstrip("\\").rstrip() + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            joined.append(current)
            current = ""
    for command in joined:
        for part in re.split(r"[|;&]", command):
            if re.search(r"(^|\s)curl\s", part):
                yield part


def curl_method(command: str) -> str:
    explicit = re.search(r"-X\s*([A-Z]+)", command)
    if explicit:
        return explicit.group(1)
    sends_body = re.search(r"\s(-d|-F|--data(-binary|-raw)?|--form|--json)(\s|=)", command)
    return "POST" if sends_body else "GET"


def example_routes(path: Path) -> list[tuple[str, str]]:
    """(method, path) of every route example in a Markdown file."""
    text = path.read_text()
    prose, code = split_code(text)
    found = []
    for line in text.splitlines():
        found += ROUTE_MENTION.findall(line)
        row = TABLE_ROW.match(line)
        if row:
            methods = [m.strip() for m in row.group(1).split(",")]
            found += [(m, p) for m in methods for p in re.findall(r"`(/[^`\s]*)`", row.group(2))]
    for command in curl_commands(code):
        found += [(curl_method(command), p) for p in SERVER_URL.findall(command)]
    for line in code:  # a WebSocket client: websockets.connect("ws://127.0.0.1:8080/ws/v1/tts")
        found += [("WS", p) for p in re.findall(r"wss?://(?:127\.0\.0\.1|localhost):8080(/[^\s'\"?]*)", line)]
    return [(method, PLACEHOLDER.sub("x", route.rstrip("."))) for method, route in found]


@pytest.mark.parametrize("path", doc_files(), ids=rel)
def test_every_route_in_an_example_is_a_route_of_the_app(path):
    unknown = sorted({f"{m} {p}" for m, p in example_routes(path) if not is_route(m, p)})
    assert unknown == [], f"{rel(path)} names routes the app does not have"


def test_every_http_route_of_the_app_is_documented():
    """Each operation of the app's OpenAPI schema appears in an example on some page (its own
    API page, and docs/README.md's route table), so a new route cannot go undocumented."""
    documented = {example for path in doc_files() for example in example_routes(path)}
    missing = []
    for template, operations in app().openapi()["paths"].items():
        pattern = re.compile(PLACEHOLDER.sub("[^/]+", template) + "$")
        for method in operations:
            if not any(m == method.upper() and pattern.match(p) for m, p in documented):
                missing.append(f"{method.upper()} {template}")
    assert missing == [], "routes no page of docs/ mentions"


def test_the_readme_has_a_first_request_per_modality():
    routes = set(example_routes(README))
    for expected in [
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/completions"),
        ("POST", "/v1/audio/speech"),
        ("POST", "/v1/audio/transcriptions"),
        ("POST", "/v1/images/generations"),
        ("WS", "/ws/v1/tts"),
    ]:
        assert expected in routes


def test_the_route_checker_sees_every_example_form_and_refuses_unknown_routes(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "Use `POST /v1/audio/speech` or `DELETE /v1/voices/{name}`; not `POST /v1/audio/karaoke`.\n\n"
        "| GET, POST | `/v1/voices` | list, register |\n\n"
        "```bash\ncurl http://127.0.0.1:8080/v1/models/load -H 'content-type: application/json' \\\n"
        '  -d \'{"model_type": "asr"}\'\ncurl -X DELETE http://127.0.0.1:8080/v1/voices/me\n'
        "curl http://127.0.0.1:8080/v1/nothing\n```\n\n"
        '```python\nwebsockets.connect("ws://127.0.0.1:8080/ws/v1/tts")\n```\n'
    )
    routes = example_routes(page)
    assert routes == [
        ("POST", "/v1/audio/speech"),
        ("DELETE", "/v1/voices/x"),
        ("POST", "/v1/audio/karaoke"),
        ("GET", "/v1/voices"),
        ("POST", "/v1/voices"),
        ("POST", "/v1/models/load"),
        ("DELETE", "/v1/voices/me"),
        ("GET", "/v1/nothing"),
        ("WS", "/ws/v1/tts"),
    ]
    unknown = [r for r in routes if not is_route(*r)]
    assert unknown == [("POST", "/v1/audio/karaoke"), ("GET", "/v1/nothing")]
    assert not is_route("GET", "/v1/audio/speech")  # a route, but not for that method
    assert not is_route("WS", "/v1/audio/speech")


# ---------------------------------------------------------------------------------------------
# docs/performance.md is written by `python -m bench.readme`


def test_performance_page_carries_the_latest_bench_results():
    from bench import readme
    from bench.__main__ import EXTRA_SCENARIOS, SCENARIOS

    page = readme.PAGE.read_text()
    blocks = set(readme.MARKER.findall(page))
    # The default scenarios are on the page, and no block names a scenario the bench lacks.
    assert set(SCENARIOS) <= blocks <= set(SCENARIOS + EXTRA_SCENARIOS), blocks
    assert all(f"<!-- /bench:{s} -->" in page for s in blocks)
    assert readme.update(page) == page, "docs/performance.md is stale: run python -m bench.readme"
