"""The Realtime conversation's items alone: positions, deletion, truncation to what was heard,
the calls waiting for an output, and the chat messages they make."""

from __future__ import annotations

import pytest

from deployments.protocol.realtime import RealtimeError
from deployments.protocol.realtime_items import ConversationItems


def message(item_id: str, role: str, text: str, audio: bool = False) -> dict:
    kind = {"user": "input", "system": "input", "assistant": "output"}[role] + ("_audio" if audio else "_text")
    part = {"type": kind, "transcript" if audio else "text": text}
    return {"id": item_id, "type": "message", "role": role, "status": "completed", "content": [part]}


def call(item_id: str, call_id: str) -> dict:
    return {"id": item_id, "type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}"}


def output(item_id: str, call_id: str, text: str) -> dict:
    return {"id": item_id, "type": "function_call_output", "call_id": call_id, "output": text}


def test_items_go_last_first_or_after_the_one_named():
    items = ConversationItems()
    assert items.add(message("a", "user", "one")) is None
    assert items.add(message("b", "user", "three")) == "a"
    assert items.add(message("c", "user", "two"), previous_item_id="a") == "a"
    assert items.add(message("s", "system", "Be brief."), previous_item_id="root") is None
    assert [i["id"] for i in items] == ["s", "a", "c", "b"] and items.last_id() == "b"
    for item, previous, param in (
        (message("a", "user", "x"), None, "item.id"),
        (message("d", "user", "x"), "zz", "previous_item_id"),
    ):
        with pytest.raises(RealtimeError) as error:
            items.add(item, previous)
        assert error.value.param == param
    items.delete("c")
    assert [m["content"] for m in items.chat_messages("Hi.")] == ["Hi.", "Be brief.", "one", "three"]
    with pytest.raises(RealtimeError) as error:
        items.delete("c")
    assert error.value.code == "item_not_found"


def test_a_response_is_owed_to_a_user_message_or_a_function_output():
    items = ConversationItems()
    assert not items.answerable()
    items.add(message("u", "user", "Weather?"))
    assert items.answerable()
    items.add(message("m", "assistant", "Let me look."))
    items.add(call("c", "call_1"))
    assert not items.answerable() and items.open_calls() == {"call_1"}
    items.add(output("o", "call_1", "sunny"))
    assert items.answerable() and items.open_calls() == set()
    assert items.chat_messages(None) == [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    items.delete("c")  # the call is gone: its output means nothing to the LLM
    assert [m["role"] for m in items.chat_messages(None)] == ["user", "assistant"]


def test_truncating_keeps_the_sentences_played_in_full():
    items = ConversationItems()
    items.add(message("u", "user", "Tell me."))
    items.add(message("a", "assistant", "One. Two. Three.", audio=True))
    items.spoken("a", [("One.", 400.0), ("Two.", 900.0), ("Three.", 1500.0), ("Four.", None)])
    items.truncate("a", 0, 1500)
    assert items.get("a")["content"][0]["transcript"] == "One. Two. Three."  # Four's audio never came
    items.truncate("a", 0, 1000)
    assert items.get("a")["content"][0]["transcript"] == "One. Two."
    items.truncate("a", 0, 899)
    assert items.get("a")["content"][0]["transcript"] == "One."
    items.truncate("a", 0, 0)
    assert items.get("a")["content"][0]["transcript"] == ""
    assert items.chat_messages(None) == [{"role": "user", "content": "Tell me."}]  # nothing heard, nothing said


@pytest.mark.parametrize(
    "item_id, content_index, end, param",
    [
        ("u", 0, 10, "item_id"),
        ("a", 1, 10, "content_index"),
        ("a", 0, 2000, "audio_end_ms"),
        ("a", 0, -1, "audio_end_ms"),
        ("x", 0, 1, "item_id"),
    ],
)
def test_a_truncation_that_does_not_fit_is_refused(item_id, content_index, end, param):
    items = ConversationItems()
    items.add(message("u", "user", "Tell me."))
    items.add(message("a", "assistant", "One.", audio=True))
    items.spoken("a", [("One.", 400.0)])
    with pytest.raises(RealtimeError) as error:
        items.truncate(item_id, content_index, end)
    assert error.value.param == param
    assert items.get("a")["content"][0]["transcript"] == "One."


def test_a_conversation_sent_from_a_later_turn_keeps_its_system_messages():
    items = ConversationItems()
    items.add(message("s", "system", "Be brief."))
    for k in range(3):
        items.add(message(f"u{k}", "user", f"q{k}"))
        items.add(message(f"a{k}", "assistant", f"a{k}"))
        items.add(call(f"c{k}", f"call_{k}"))
        items.add(output(f"o{k}", f"call_{k}", "out"))
    assert items.turns() == 3
    whole = items.chat_messages(None)
    assert [m["role"] for m in whole] == ["system", *["user", "assistant", "tool"] * 3]
    later = items.chat_messages("Hi.", first_turn=2)
    assert [m["content"] for m in later[:3]] == ["Hi.", "Be brief.", "q2"] and len(later) == 5
    assert items.chat_messages(None, first_turn=9) == whole  # no such turn: the whole conversation
