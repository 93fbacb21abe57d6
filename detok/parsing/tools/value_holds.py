"""What an XML family's string value holds back at its end while it streams: the whitespace that is
not part of the value if the value ends there (vLLM strips it). One rule per family, used by the
family's parser and by the worker's compiled path (`detok.stream.typed_fast`), so both hold the same."""

from __future__ import annotations

from collections.abc import Callable

from detok.parsing.types import VALUE_NEWLINE, VALUE_VERBATIM

SPACE = " \t\n\r"


def hold_one_newline(text: str, held: str) -> tuple[str, str]:
    """qwen3_coder: (raw text to pass on, text held after) for `text` arriving while `held` is held;
    one newline at the end is held."""
    text = held + text
    if text.endswith("\n"):
        return text[:-1], "\n"
    return text, ""


def hold_nothing(text: str, held: str) -> tuple[str, str]:
    """glm45: nothing is held; a string value is all the text between its tags (vLLM #42026)."""
    return held + text, ""


HOLDS: dict[str, Callable[[str, str], tuple[str, str]]] = {
    VALUE_NEWLINE: hold_one_newline, VALUE_VERBATIM: hold_nothing}
