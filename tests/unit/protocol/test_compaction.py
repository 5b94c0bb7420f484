"""Context compaction's pure parts: the summary's encoding and its refusal of foreign content,
the transcript the summariser reads, the window (user messages, then the compaction item), and
a compaction item given back as input becoming the system prompt's summary."""

from __future__ import annotations

import pytest

from deployments.protocol.compaction import (
    SUMMARY_HEADING,
    compacted_window,
    compaction_item,
    decode_summary,
    encode_summary,
    summary_chat_body,
    transcript,
)
from deployments.protocol.errors import APIError
from deployments.protocol.responses import CompactRequest, chat_messages, from_turn, normalise_items

ITEMS = normalise_items(
    [
        {"role": "user", "content": "Remember slate."},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "OK."}]},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"q": "slate"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "a rock"},
        {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "hm"}]},
        {"role": "user", "content": "Compress."},
    ]
)


@pytest.mark.parametrize("summary", ["", "The code word is slate.", "ünïcode ✓ and\nlines"])
def test_a_summary_survives_its_encoding(summary):
    assert decode_summary(encode_summary(summary), "input[0]") == summary


@pytest.mark.parametrize(
    "content", [None, 5, "gAAAAAB-openai-encrypted", "ominix.compaction.v1:!!!", encode_summary("x")[:-4] + "AAAA"]
)
def test_content_this_server_did_not_write_is_a_400_naming_the_item(content):
    with pytest.raises(APIError) as e:
        decode_summary(content, "input[3]")
    assert e.value.status_code == 400 and e.value.code == "invalid_encrypted_content"
    assert e.value.message.startswith("input[3].encrypted_content")


def test_the_transcript_names_every_turn_but_the_thinking():
    assert transcript(ITEMS).split("\n") == [
        "User: Remember slate.",
        "Assistant: OK.",
        'Assistant called lookup({"q": "slate"})',
        "Tool result for c1: a rock",
        "User: Compress.",
    ]


def test_the_summary_request_is_greedy_and_bounded_with_the_instructions_after_the_prompt():
    request = CompactRequest(model="m", input="x", instructions="Keep open tasks.", prompt_cache_key="k")
    body = summary_chat_body(request, ITEMS)
    assert (body["model"], body["temperature"], body["max_completion_tokens"], body["prompt_cache_key"]) == (
        "m",
        0.0,
        512,
        "k",
    )
    assert body["messages"][0]["content"].endswith("Keep open tasks.")
    assert body["messages"][1] == {"role": "user", "content": transcript(ITEMS)}


def test_the_window_is_the_user_messages_then_the_compaction_item():
    item = compaction_item("cmp_1", "S")
    window = compacted_window(ITEMS, item)
    assert [i["content"][0]["text"] for i in window[:-1]] == ["Remember slate.", "Compress."]
    assert window[-1] == {"id": "cmp_1", "type": "compaction", "encrypted_content": encode_summary("S")}


def test_a_window_given_back_puts_the_summary_in_the_one_system_message():
    window = compacted_window(ITEMS, compaction_item("cmp_1", "Slate is the word."))
    items = normalise_items(window + [{"role": "user", "content": "The word?"}])
    messages = chat_messages(items, "Be brief.")
    assert messages[0] == {"role": "system", "content": f"Be brief.\n\n{SUMMARY_HEADING} Slate is the word."}
    assert [m["role"] for m in messages] == ["system", "user", "user", "user"]
    # truncation "auto" keeps the compaction item, as it keeps the system messages
    assert from_turn(items, 2)[0]["type"] == "compaction"


@pytest.mark.parametrize(
    "body", [{"input": "x"}, {"model": "", "input": "x"}, {"model": "m"}, {"model": "m", "input": ""}]
)
def test_a_compact_request_needs_a_model_and_something_to_compact(body):
    with pytest.raises(ValueError):
        CompactRequest.model_validate(body)
