"""Tool calls through the real path: the tiny model's tokenizer streams tokens through its
streaming detokenizer and the OutputParser; mlx-lm's parser (json_tools for Qwen3) reads them."""

import json

from deployments.generation.output import OutputParser
from deployments.llm.tool_calls import parse_tool_calls

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def stream_model_text(tokenizer, text, **parser_kw):
    parser = OutputParser(
        think=(tokenizer.think_start, tokenizer.think_end),
        tool_call=(tokenizer.tool_call_start, tokenizer.tool_call_end),
        **parser_kw,
    )
    detok = tokenizer.detokenizer
    content, reasoning, tool_texts = "", "", []
    for token in tokenizer.encode(text, add_special_tokens=False):
        detok.add_token(token)
        out = parser.feed(detok.last_segment)
        content, reasoning, tool_texts = content + out.content, reasoning + out.reasoning, tool_texts + out.tool_texts
    detok.finalize()
    out = parser.feed(detok.last_segment)
    tail = parser.finish()
    return (
        content + out.content + tail.content,
        reasoning + out.reasoning + tail.reasoning,
        tool_texts + out.tool_texts + tail.tool_texts,
    )


def test_qwen_tool_call_becomes_openai_tool_calls(tiny_tokenizer):
    text = (
        "<think>\nThe user wants weather.\n</think>\n\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>'
    )
    content, reasoning, tool_texts = stream_model_text(tiny_tokenizer, text)
    assert reasoning.strip() == "The user wants weather."
    assert content == ""
    calls, failed = parse_tool_calls(tool_texts, tiny_tokenizer.tool_parser, TOOLS)
    assert failed == []
    assert len(calls) == 1
    call = calls[0]
    assert call.id.startswith("call_") and len(call.id) == len("call_") + 24
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "days": 2}


def test_unparseable_tool_call_is_reported_not_dropped(tiny_tokenizer):
    calls, failed = parse_tool_calls(["{not json"], tiny_tokenizer.tool_parser, TOOLS)
    assert calls == [] and failed == ["{not json"]


def test_string_arguments_are_kept_verbatim():
    calls, _ = parse_tool_calls(['{"name": "f", "arguments": "{\\"a\\": 1}"}'], lambda t, _: json.loads(t), None)
    assert calls[0].function.arguments == '{"a": 1}'
