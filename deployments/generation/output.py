"""Turns a model's streamed text into what an OpenAI client sees.

The model emits one string; the client wants three things from it: the answer (`content`),
the thinking (`reasoning_content`, between think markers) and tool calls (between tool-call
markers), and it wants generation to end at the first stop string, with the stop string left
out. Markers and stop strings can be split across tokens in any way, so text that might be the
start of one is held back until the next piece decides it.

Pure Python: the markers come from the tokenizer (mlx-lm's TokenizerWrapper knows them per
model family), the parsing of a finished tool call from mlx-lm's tool parsers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

NORMAL, REASONING, TOOL = "normal", "reasoning", "tool"
_STOP = "stop"


@dataclass
class ParsedText:
    content: str = ""
    reasoning: str = ""
    tool_texts: list[str] = field(default_factory=list)
    stopped: bool = False  # a stop string matched: generation must end here


class OutputParser:
    def __init__(
        self,
        stop: Sequence[str] = (),
        think: Optional[tuple[str, str]] = None,
        tool_call: Optional[tuple[str, str]] = None,
        initial_state: str = NORMAL,
    ):
        stop = [s for s in stop if s]
        # state -> [(marker, action)]; an action is a next state or _STOP.
        self._rules: dict[str, list[tuple[str, str]]] = {NORMAL: [], REASONING: [], TOOL: []}
        if think:
            self._rules[NORMAL].append((think[0], REASONING))
            self._rules[REASONING].append((think[1], NORMAL))
        if tool_call:
            self._rules[NORMAL].append((tool_call[0], TOOL))
            self._rules[REASONING].append((tool_call[0], TOOL))
            self._rules[TOOL].append((tool_call[1], NORMAL))
        for s in stop:  # stop strings end the answer and the thinking, not a tool call
            self._rules[NORMAL].append((s, _STOP))
            self._rules[REASONING].append((s, _STOP))
        # state -> the first characters of its markers: a text holding none of them can neither
        # contain a marker nor end in the start of one (the usual token, passed through at once).
        self._starts = {state: "".join({m[0] for m, _ in rules}) for state, rules in self._rules.items()}
        self.state = initial_state
        self.stopped = False
        self.stopped_by: Optional[str] = None  # the stop string that matched
        self._buf = ""
        self._tool_text = ""
        # Models put newlines right after markers ("<think>\n", "</think>\n\n"): not content.
        self._strip_leading_newlines = initial_state == REASONING

    def feed(self, text: str) -> ParsedText:
        out = ParsedText()
        if self.stopped:
            out.stopped = True
            return out
        if not self._buf and not self._rules[self.state] and not self._strip_leading_newlines:
            self._emit(text, out)  # nothing to look for in this state: the text as it comes
            return out
        self._buf += text
        if not any(c in self._buf for c in self._starts[self.state]):
            self._emit(self._buf, out)
            self._buf = ""
            return out
        while True:
            found = self._first_marker()
            if found is None:
                hold = self._partial_marker_len()
                self._emit(self._buf[: len(self._buf) - hold], out)
                self._buf = self._buf[len(self._buf) - hold :]
                return out
            pos, marker, action = found
            self._emit(self._buf[:pos], out)
            self._buf = self._buf[pos + len(marker) :]
            if action == _STOP:
                self.stopped = out.stopped = True
                self.stopped_by = marker
                self._buf = ""
                return out
            self._enter(action, out)

    def finish(self) -> ParsedText:
        """Flush what was held back; an unterminated tool call still counts as one."""
        out = ParsedText(stopped=self.stopped)
        self._emit(self._buf, out)
        self._buf = ""
        if self.state == TOOL and self._tool_text.strip():
            out.tool_texts.append(self._tool_text)
            self._tool_text = ""
        return out

    # -----------------------------------------------------------------------------------------

    def _first_marker(self) -> Optional[tuple[int, str, str]]:
        best = None
        for marker, action in self._rules[self.state]:
            pos = self._buf.find(marker)
            if pos < 0:
                continue
            if best is None or pos < best[0] or (pos == best[0] and len(marker) > len(best[1])):
                best = (pos, marker, action)
        return best

    def _partial_marker_len(self) -> int:
        """Length of the longest buffer suffix that could still grow into a marker."""
        longest = 0
        for marker, _ in self._rules[self.state]:
            for n in range(min(len(marker) - 1, len(self._buf)), longest, -1):
                if self._buf.endswith(marker[:n]):
                    longest = n
                    break
        return longest

    def _emit(self, text: str, out: ParsedText) -> None:
        if self._strip_leading_newlines and self.state != TOOL:
            text = text.lstrip("\n")
            if text:
                self._strip_leading_newlines = False
        if not text:
            return
        if self.state == NORMAL:
            out.content += text
        elif self.state == REASONING:
            out.reasoning += text
        else:
            self._tool_text += text

    def _enter(self, state: str, out: ParsedText) -> None:
        if self.state == TOOL:
            out.tool_texts.append(self._tool_text)
            self._tool_text = ""
        self.state = state
        self._strip_leading_newlines = True
