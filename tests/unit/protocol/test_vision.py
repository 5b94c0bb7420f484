"""OminiX-API's /v1/vlm/completions body as the chat completion the VLM slot runs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from deployments.protocol.vision import VLMCompletionRequest


def test_the_route_is_greedy_unless_asked():
    # OminiX-API samples this route at temperature 0; a chat completion's default would be 1.0.
    assert VLMCompletionRequest(image="aGk=", prompt="p").as_chat().temperature == 0.0
    assert VLMCompletionRequest(image="aGk=", prompt="p", temperature=0.7).as_chat().temperature == 0.7


def test_the_image_becomes_a_data_url_part_before_the_prompt():
    chat = VLMCompletionRequest(image=" aGk= ", prompt="Describe.", max_tokens=3).as_chat()
    parts = chat.messages[0].content
    assert [p.type for p in parts] == ["image_url", "text"]
    assert parts[0].image_url["url"] == "data:image/png;base64,aGk=" and parts[1].text == "Describe."
    assert chat.max_tokens == 3


@pytest.mark.parametrize("body", [{"image": "  ", "prompt": "p"}, {"image": "aGk=", "prompt": "p", "temperature": 3}])
def test_a_blank_image_or_a_wild_temperature_is_refused(body):
    with pytest.raises(ValidationError):
        VLMCompletionRequest(**body)
