"""Which marker texts are single tokens of a tokenizer (detected by id in the worker)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from detok.tokenizer.base import Tokenizer

if TYPE_CHECKING:
    from detok.parsing.output import OutputParser
    from detok.parsing.types import OutputParsing


def single_token_ids(tok: Tokenizer) -> Callable[[str], int | None]:
    """`token_id(text)` as `OutputParser` wants it: the id of an added (or special) token whose
    content is exactly `text` and that the tokenizer encodes as that one id; else None. Ordinary
    vocabulary pieces (`{`, `[`) are never markers by id: BPE merges them with their neighbours, so
    they are matched in the text instead. Cached per text (a few markers per family)."""
    cache: dict[str, int | None] = {}
    added = tok.added_tokens()

    def token_id(text: str) -> int | None:
        if text in cache:
            return cache[text]
        tid = tok.token_to_id(text)
        ok = tid is not None and tid in added and tok.encode(text) == [tid]
        cache[text] = tid if ok else None
        return cache[text]

    return token_id


def check_parsers(tok: Tokenizer, reasoning_parser: str | None, tool_parser: str | None) -> None:
    """At start (the server's or a pool worker's): ParserConfigError naming a parser that does not
    exist, or whose marker tokens this tokenizer lacks."""
    from detok.parsing.output import OutputParser
    from detok.parsing.types import OutputParsing

    if reasoning_parser or tool_parser:
        OutputParser(OutputParsing(reasoning_parser, tool_parser), single_token_ids(tok))


def request_parser(parsing: OutputParsing | None, rid: int, token_id: Callable[[str], int | None]) -> OutputParser | None:
    """A registration's OutputParser (the worker's), or None for plain text (no parser named).
    Raises ParsingLimitError / ParserConfigError: that request's error. Call ids are seeded by the
    registration's `call_id_seed`, or by the rid when it has none: the same on a replay."""
    if parsing is None or not (parsing.reasoning_parser or parsing.tool_parser):
        return None  # (ahead of the imports: every plain registration comes here)
    import msgspec

    from detok.parsing.limits import check_parsing
    from detok.parsing.output import OutputParser

    check_parsing(parsing)
    if not parsing.call_id_seed:
        parsing = msgspec.structs.replace(parsing, call_id_seed=f"{rid:x}")
    return OutputParser(parsing, token_id)
