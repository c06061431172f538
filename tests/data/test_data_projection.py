"""Prompt projection and the column rename: each accepted shape and each refusal, message checked."""

from __future__ import annotations

from typing import Any

import pytest

from lightning_rl.data import project_prompt
from lightning_rl.data.projection import make_preference_projector, make_row_projector
from lightning_rl.data.reader import RowError

pytestmark = pytest.mark.unit


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def refused(prompt: Any) -> str:
    with pytest.raises(RowError) as info:
        project_prompt(prompt)
    return str(info.value)


def test_string_prompt_passes_unchanged() -> None:
    assert project_prompt("2+2=") == "2+2="


def test_conversation_mixing_string_and_list_content_passes_untouched() -> None:
    prompt = [
        {"role": "system", "content": "be brief", "name": None},
        user([{"type": "text", "text": "what is this?"}, {"type": "image", "image": "cat.png"}]),
        {"role": "assistant", "content": "a cat"},
        user([{"type": "video", "video": "v.mp4", "fps": None, "max_pixels": None}]),
    ]
    assert project_prompt(prompt) is prompt
    assert prompt[3]["content"][0]["fps"] is None  # a part's own optional key stays null: no rewriting


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ("", "'prompt' is an empty string; a prompt must be non-empty"),
        ([], "'prompt' is an empty list; a conversation needs at least one turn"),
        (None, "'prompt' must be a non-empty string or a list of {'role', 'content'} turns, got null"),
        ({"role": "user"}, "'prompt' must be a non-empty string or a list of {'role', 'content'} turns, got an object"),
        (["hi"], "prompt[0] must be a {'role', 'content'} object, got a string"),
        ([{"content": "hi"}], "prompt[0].role must be a non-empty string, got missing"),
        ([{"role": "", "content": "hi"}], "prompt[0].role must be a non-empty string, got an empty string"),
        ([{"role": 3, "content": "hi"}], "prompt[0].role must be a non-empty string, got a number"),
        ([{"role": "user"}], "prompt[0] has no 'content'"),
        ([user("")], "prompt[0].content is an empty string"),
        ([user([])], "prompt[0].content is an empty list of parts"),
        ([user(None)], "prompt[0].content must be a non-empty string or a list of content parts, got null"),
        ([user(["text"])], "prompt[0].content[0] must be a content-part object, got a string"),
        ([user([{"type": 5, "text": "x"}])], "prompt[0].content[0].type must be a non-empty string, got a number"),
    ],
)
def test_malformed_prompts_are_refused(prompt: Any, message: str) -> None:
    assert refused(prompt) == message


NULL_FILL = "(the null-fill signature of a columnar export; drop null keys from content parts)"


def test_null_payload_key_on_a_text_part_is_refused() -> None:
    prompt = [user("hi"), user([{"type": "text", "text": "look", "image": None}])]
    assert refused(prompt) == f"prompt[1].content[0].image is null on a 'text' part {NULL_FILL}"


def test_null_payload_key_on_an_image_part_with_another_handle_is_refused() -> None:
    prompt = [user([{"type": "image", "image_url": {"url": "x.png"}, "image": None}])]
    assert refused(prompt) == f"prompt[0].content[0].image is null on a 'image' part {NULL_FILL}"


def test_null_type_is_refused() -> None:
    assert refused([user([{"type": None, "text": "x"}])]) == f"prompt[0].content[0].type is null {NULL_FILL}"


def test_projector_renames_columns_and_keeps_every_other_column() -> None:
    project = make_row_projector("question", "answer")
    row = {"id": 7, "question": "2+2=", "answer": "4", "meta": {"src": "x"}}
    assert project(row) == {"id": 7, "prompt": "2+2=", "reference": "4", "meta": {"src": "x"}}
    assert row == {"id": 7, "question": "2+2=", "answer": "4", "meta": {"src": "x"}}  # the input is not modified


def test_projector_with_default_columns_hands_the_row_on_as_is() -> None:
    row = {"prompt": "x", "reference": "y"}
    assert make_row_projector("prompt", "reference")(row) is row
    assert make_row_projector()(row) is row


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"q": "x"}, "the response column 'a' (data.response_column) is missing"),
        ({"q": "x", "a": None}, "the response column 'a' (data.response_column) is null"),
        ({"a": "x"}, "no 'q' column (data.prompt_column); columns: ['a']"),
        ({"q": "", "a": "1"}, "'q' is an empty string; a prompt must be non-empty"),
        ({"q": "x", "a": "1", "prompt": "y"}, "renaming column 'q' to 'prompt' would overwrite the row's own 'prompt'"),
        ({"q": "x", "a": "1", "_index": 3}, "column '_index' is reserved"),
    ],
)
def test_projector_refusals(row: dict[str, Any], message: str) -> None:
    with pytest.raises(RowError) as info:
        make_row_projector("q", "a")(row)
    assert str(info.value).startswith(message)


def test_response_value_may_be_any_non_null_json() -> None:
    assert make_row_projector("prompt", "gt")({"prompt": "x", "gt": {"answer": 0}}) == {
        "prompt": "x",
        "reference": {"answer": 0},
    }


def test_preference_projector() -> None:
    project = make_preference_projector("q", "good", "bad")
    assert project({"q": "x", "good": "1", "bad": [user("2")], "id": 1}) == {
        "prompt": "x",
        "chosen": "1",
        "rejected": [user("2")],
        "id": 1,
    }
    with pytest.raises(RowError, match=r"^'bad' must be a non-empty string or a non-empty list of turns, got null"):
        project({"q": "x", "good": "1", "bad": None})
    with pytest.raises(RowError, match=r"^no 'good' column"):
        project({"q": "x", "bad": "1"})
