"""The curl examples of the peers' READMEs (tests/fixtures/seeds: OminiX-API's, 000, and
MiniInfer's, 003), parsed out verbatim so a test can run each against this server.

The seed files are the READMEs as a web page renders them, which flattened some lines; the
parser undoes exactly that and nothing else:
- a comment glued to the end of a command (`...}'# Text-to-image ...`) starts a new line again;
- a line continuation followed by more text (`... \\ -H "..."`) is a line break again.
A logical line (continuations joined) holding `curl ` is an example, including a curl shown in
a comment (`# 弃用:curl -X DELETE ...`), from `curl` on. An example that uses `$NAME` gets the
seed's own earlier `NAME=...` line in front of it. The only edit is the address: the README's
server (`http://localhost:8080`, `https://<host>`, `https://<LAN-IP>:8950`, `...`) becomes the
test server's; curls of other hosts (the install script on GitHub) are not server examples.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SEEDS = Path(__file__).parent / "fixtures" / "seeds"
SERVER = re.compile(r"https?://(?:localhost:8080|<host>|<LAN-IP>:8950)|\.\.\.(?=/v1/)")
ASSIGNMENT = re.compile(r"^([A-Z][A-Z0-9_]*)=(.*)$")
CURL = re.compile(r"(?<![\w-])curl ")


@dataclass(frozen=True)
class Example:
    seed: str
    command: str  # as in the seed, with its earlier `NAME=...` lines

    def against(self, base_url: str) -> str:
        return SERVER.sub(base_url, self.command)


def logical_lines(text: str) -> list[str]:
    text = re.sub(r"'#", "'\n#", text)
    text = re.sub(r"\\ (?=\S)", "\\\n", text)
    lines, current = [], ""
    for line in text.splitlines():
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1].rstrip() + " "
        else:
            lines.append((current + line).strip())
            current = ""
    return lines


def examples(seed: str) -> list[Example]:
    path = next(SEEDS.glob(f"{seed}_*.txt"))
    found, assignments = [], {}
    for line in logical_lines(path.read_text()):
        assigned = ASSIGNMENT.match(line)
        if assigned:
            assignments[assigned.group(1)] = line
        if not CURL.search(line) or not SERVER.search(line):
            continue
        for command in _commands(line, assigned is not None):
            needs = [assignments[name] for name in re.findall(r"\$([A-Z][A-Z0-9_]*)", command) if name in assignments]
            found.append(Example(seed, "\n".join([*(n for n in needs if n != line), command])))
    return found


def _commands(line: str, assignment: bool) -> list[str]:
    """The commands of one logical line: the line itself when it assigns a curl's output, else
    each `curl ...` on it (one in a trailing comment included)."""
    if assignment:
        return [line]
    starts = [m.start() for m in CURL.finditer(line)]
    pieces = [line[a:b] for a, b in zip(starts, [*starts[1:], len(line)])]
    return [re.sub(r"\s+#[^'\"]*$", "", piece).strip() for piece in pieces if SERVER.search(piece)]
