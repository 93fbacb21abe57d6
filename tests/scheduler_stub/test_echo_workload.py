"""The echo workload gives back the last user message whole: with a template that closes a message
with a bare `\\n`, a multi-line message is not cut at its first newline (the last close before the
generation prompt ends it), on the real qwen2 tokenizer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detok.tokenizer.default import default_tokenizer_dir
from detok.tokenizer.factory import load_tokenizer
from scheduler_stub.echo import UserTurn, echo_text, user_turn_markers
from scheduler_stub.workload import END, make_workload

# a plain-text chat format: "role: content\n" per message, "assistant:" as the generation prompt
BARE_NEWLINE = ("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                "{% if add_generation_prompt %}assistant:{% endif %}")


def _tok(template: str | None = None):  # type: ignore[no-untyped-def]
    tok = load_tokenizer(str(default_tokenizer_dir()))  # a fresh one: the template is set on it
    if template is not None:
        tok.set_chat_template(template)
    return tok


def _echo(tok, messages: list[dict[str, str]], **kwargs: object) -> str:  # type: ignore[no-untyped-def]
    stream = make_workload("echo", tok).tokens(tok.encode(tok.apply_chat_template(messages, **kwargs)), 0)
    ids = []
    while (i := next(stream)) != END:
        ids.append(i)
    return tok.decode(ids, skip_special_tokens=False)


def test_the_markers_of_a_bare_newline_template() -> None:
    assert user_turn_markers(_tok(BARE_NEWLINE)) == UserTurn("user: ", "\n", "assistant:")


@pytest.mark.parametrize("template", [BARE_NEWLINE, None], ids=["bare_newline", "qwen2_im_end"])
def test_a_multi_line_message_comes_back_whole(template: str | None) -> None:
    tok = _tok(template)
    said = "first line\nsecond line\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"
    history = [{"role": "user", "content": "a\nb"}, {"role": "assistant", "content": "c\nd"}]
    assert _echo(tok, [{"role": "user", "content": said}]) == said
    assert _echo(tok, [*history, {"role": "user", "content": said}]) == said


def test_a_generation_prompt_grown_by_template_kwargs_is_left_out() -> None:
    """Qwen3's enable_thinking=false appends an empty think block to the generation prompt."""
    template = BARE_NEWLINE.replace("assistant:", "assistant:{% if enable_thinking is false %}<think>\n\n</think>\n{% endif %}")
    tok = _tok(template)
    assert _echo(tok, [{"role": "user", "content": "x\ny\n"}], enable_thinking=False) == "x\ny\n"


@settings(max_examples=60, deadline=None)
@given(said=st.text(alphabet="ab \n:<>/", min_size=1, max_size=40).filter(lambda s: "user: " not in s))
def test_any_message_comes_back_whole(said: str) -> None:
    prompt = f"user: q\nassistant: r\nuser: {said}\nassistant:"
    assert echo_text(prompt, UserTurn("user: ", "\n", "assistant:")) == said
