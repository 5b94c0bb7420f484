"""The Realtime conversation's items in order (user and assistant messages, function calls and
their outputs), as a client edits them: added at a position, retrieved, deleted, an assistant's
audio truncated to what was played; and the chat messages they make for the LLM. Ray-free and
MLX-free; the WebSocket is deployments/ingress/serving/conversation.py.
"""

from __future__ import annotations

from typing import Any, Optional

from deployments.protocol.realtime import RealtimeError
from deployments.protocol.responses import chat_messages

ROOT = "root"  # a previous_item_id that puts an item first


class ConversationItems:
    def __init__(self) -> None:
        self._items: list[dict] = []
        # An assistant message spoken aloud: each sentence and the ms of audio at its end (None:
        # its audio never came).
        self._spoken: dict[str, list[tuple[str, Optional[float]]]] = {}

    def __iter__(self):
        return iter(self._items)

    def last_id(self) -> Optional[str]:
        return self._items[-1]["id"] if self._items else None

    def answerable(self) -> bool:
        """Whether a response has something to answer: a user message or a function's output last."""
        last = self._items[-1] if self._items else None
        return last is not None and (last["type"] == "function_call_output" or last.get("role") == "user")

    def index(self, item_id: Any, param: str = "item_id") -> int:
        for i, item in enumerate(self._items):
            if item["id"] == item_id:
                return i
        raise RealtimeError(f"No item with id '{item_id}' in the conversation", param, "item_not_found")

    def get(self, item_id: Any) -> dict:
        return self._items[self.index(item_id)]

    def add(self, item: dict, previous_item_id: Optional[str] = None) -> Optional[str]:
        """Add `item` after `previous_item_id` (None: last; "root": first); the id it follows."""
        if any(i["id"] == item["id"] for i in self._items):
            raise RealtimeError(f"An item with id '{item['id']}' is already in the conversation", "item.id")
        if previous_item_id is None:
            at = len(self._items)
        elif previous_item_id == ROOT:
            at = 0
        else:
            at = self.index(previous_item_id, "previous_item_id") + 1
        self._items.insert(at, item)
        return self._items[at - 1]["id"] if at else None

    def update(self, item: dict) -> None:
        """An item already added, now changed (a response's message when it is done)."""
        self._items[self.index(item["id"])] = item

    def delete(self, item_id: Any) -> None:
        del self._items[self.index(item_id)]
        self._spoken.pop(item_id, None)

    def spoken(self, item_id: str, sentences: list[tuple[str, Optional[float]]]) -> None:
        self._spoken[item_id] = sentences

    def truncate(self, item_id: Any, content_index: Any, audio_end_ms: Any) -> None:
        """Cut an assistant message's audio at `audio_end_ms` (what the client played): its
        transcript keeps the sentences whose audio ended by then, so the LLM's context holds
        nothing the user did not hear."""
        item = self.get(item_id)
        if item["type"] != "message" or item["role"] != "assistant" or item["content"][0]["type"] != "output_audio":
            raise RealtimeError("Only an assistant message with audio can be truncated", "item_id")
        if content_index != 0:
            raise RealtimeError("An assistant message has one content part: content_index 0", "content_index")
        sentences = self._spoken.get(item_id, [])
        length = max((end for _, end in sentences if end is not None), default=0.0)
        if not isinstance(audio_end_ms, int) or isinstance(audio_end_ms, bool) or not 0 <= audio_end_ms <= length:
            raise RealtimeError(
                f"audio_end_ms must be an integer from 0 to the audio's {length:.0f} ms", "audio_end_ms"
            )
        heard = [(text, end) for text, end in sentences if end is not None and end <= audio_end_ms]
        self._spoken[item_id] = heard
        transcript = " ".join(text for text, _ in heard)
        self.update({**item, "content": [{**item["content"][0], "transcript": transcript}]})

    def open_calls(self) -> set[str]:
        """The call ids of the function calls that have no output yet."""
        calls = {i["call_id"] for i in self._items if i["type"] == "function_call"}
        return calls - {i["call_id"] for i in self._items if i["type"] == "function_call_output"}

    def turns(self) -> int:
        """The user messages: a conversation sent from a later one leaves the earlier turns out."""
        return sum(1 for i in self._items if i.get("role") == "user")

    def chat_messages(self, instructions: Optional[str], first_turn: int = 0) -> list[dict]:
        """The conversation as chat messages (deployments/protocol/responses.py's conversion:
        an assistant's words and the calls after them are one turn), from the `first_turn`-th
        user message on (system messages are always sent). Assistant messages with nothing
        heard and outputs whose call is not sent are left out."""
        users = [k for k, i in enumerate(self._items) if i.get("role") == "user"]
        start = users[first_turn] if 0 < first_turn < len(users) else 0
        sent = [i for k, i in enumerate(self._items) if k >= start or i.get("role") == "system"]
        calls = {i["call_id"] for i in sent if i["type"] == "function_call"}
        items = []
        for item in sent:
            if item["type"] == "function_call_output" and item["call_id"] not in calls:
                continue
            if item["type"] != "message":
                items.append(item)
                continue
            text = "".join(p.get("text", p.get("transcript")) or "" for p in item["content"])
            if item["role"] == "assistant" and not text:
                continue
            kind = "output_text" if item["role"] == "assistant" else "input_text"
            items.append({"type": "message", "role": item["role"], "content": [{"type": kind, "text": text}]})
        return chat_messages(items, instructions)
