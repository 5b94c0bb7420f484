"""OutputParser: markers and stop strings split across chunks in every possible way."""

import random

import pytest

from deployments.generation.output import NORMAL, REASONING, OutputParser

THINK = ("<think>", "</think>")
TOOL = ("<tool_call>", "</tool_call>")


def run(text, pieces, **kw):
    """Feed `text` cut at the given positions; return the accumulated result."""
    parser = OutputParser(**kw)
    content = reasoning = ""
    tools, stopped = [], False
    cuts = [0, *pieces, len(text)]
    for a, b in zip(cuts, cuts[1:]):
        out = parser.feed(text[a:b])
        content += out.content
        reasoning += out.reasoning
        tools += out.tool_texts
        stopped = stopped or out.stopped
        if stopped:
            break
    tail = parser.finish()
    return content + tail.content, reasoning + tail.reasoning, tools + tail.tool_texts, stopped


def every_split(text):
    yield []
    for i in range(1, len(text)):
        yield [i]
    yield list(range(1, len(text)))  # one character at a time


@pytest.mark.parametrize("stop", ["END", "E", "the end"])
def test_stop_string_is_honoured_across_any_boundary(stop):
    text = f"hello world {stop} never seen"
    for cuts in every_split(text):
        content, _, _, stopped = run(text, cuts, stop=[stop])
        assert content == "hello world "
        assert stopped


def test_earliest_of_several_stop_strings_wins():
    for cuts in every_split("abc XYZ def STOP"):
        content, _, _, stopped = run("abc XYZ def STOP", cuts, stop=["STOP", "XYZ"])
        assert (content, stopped) == ("abc ", True)


def test_partial_stop_prefix_at_the_end_is_released():
    content, _, _, stopped = run("value is EN", [9], stop=["END"])
    assert (content, stopped) == ("value is EN", False)


def test_reasoning_is_split_from_content():
    text = "<think>\nlet me think\n</think>\n\nThe answer is 4."
    for cuts in every_split(text):
        content, reasoning, _, _ = run(text, cuts, think=THINK)
        assert content == "The answer is 4."
        assert reasoning == "let me think\n"


def test_template_opened_thinking_starts_in_reasoning():
    content, reasoning, _, _ = run("pondering</think>\n\nyes", [3], think=THINK, initial_state=REASONING)
    assert (content, reasoning) == ("yes", "pondering")


def test_tool_calls_are_extracted():
    text = (
        'Sure.\n<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>\n<tool_call>{"name": "g"}</tool_call>'
    )
    for cuts in every_split(text):
        content, _, tools, _ = run(text, cuts, tool_call=TOOL)
        assert content == "Sure.\n"
        assert [t.strip() for t in tools] == ['{"name": "f", "arguments": {"x": 1}}', '{"name": "g"}']


def test_unterminated_tool_call_still_counts():
    _, _, tools, _ = run('<tool_call>{"name": "f"}', [4], tool_call=TOOL)
    assert tools == ['{"name": "f"}']


def test_stop_strings_do_not_cut_tool_calls():
    text = '<tool_call>{"name": "STOP"}</tool_call>after STOP tail'
    content, _, tools, stopped = run(text, [], tool_call=TOOL, stop=["STOP"])
    assert tools == ['{"name": "STOP"}'] and content == "after " and stopped


def test_no_markers_passes_text_through():
    text = "plain <think> text </tool_call>"
    assert run(text, [3, 9], initial_state=NORMAL)[0] == text


def test_the_parser_names_the_stop_string_that_matched():
    parser = OutputParser(stop=["STOP", "XYZ"])
    assert parser.stopped_by is None
    parser.feed("abc XY")
    parser.feed("Z def STOP")
    assert parser.stopped and parser.stopped_by == "XYZ"


def test_a_piece_without_a_markers_first_character_passes_as_the_search_would_pass_it():
    """Text holding no first character of the state's markers is emitted without searching it;
    fed the same pieces, a parser that always searches gives the same output piece by piece."""
    rng = random.Random(7)
    words = ["<think>", "</think>", "<tool_call>", "</tool_call>", "END", "<", "</", "E", "th", "hello ", "\n", "x"]
    for _ in range(400):
        text = "".join(rng.choice(words) for _ in range(rng.randrange(1, 12)))
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randrange(0, 6))))
        kw = dict(stop=["END"], think=THINK, tool_call=TOOL, initial_state=rng.choice([NORMAL, REASONING]))
        fast, searching = OutputParser(**kw), OutputParser(**kw)
        searching._starts = dict.fromkeys(searching._starts, "".join(set(text)))  # every piece searched
        for a, b in zip([0, *cuts], [*cuts, len(text)]):
            assert fast.feed(text[a:b]) == searching.feed(text[a:b]), (text, cuts)
        assert fast.finish() == searching.finish()
