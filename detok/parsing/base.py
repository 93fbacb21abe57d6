"""The two parser interfaces every family implements.

Both are incremental: `feed` takes the next piece of raw text and returns what is certain so far;
text that could still become a marker (a prefix of `<tool_call>`, a bare `{` opening a JSON call) is
held back and returned by a later `feed` or by `finish`, never dropped. A parser never sees the future,
and its joined output must not depend on how the text was cut into pieces.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import ClassVar

from detok.parsing.types import Piece, Steady, ToolCallDelta, ToolSpec


class ReasoningParser(ABC):
    """Splits raw text into reasoning text and the content that follows (or precedes) it."""

    # vLLM's name first, then aliases (SGLang's names)
    names: ClassVar[tuple[str, ...]]
    # marker strings this family uses; the worker detects the ones that are single tokens by id
    markers: ClassVar[tuple[str, ...]]
    # markers that must be single tokens of the tokenizer (else: error at start naming them)
    required_tokens: ClassVar[tuple[str, ...]] = ()
    # False: chat_template_kwargs' thinking switch does not open reasoning in the prompt (the model
    # writes its own start marker), so it does not decide where the output starts
    thinking_switch: ClassVar[bool] = True
    # True: a request this family parses does not skip special tokens, whatever it asks (its terminals
    # are text of several special tokens, Kimi K3's XTML, as vLLM's kimi_k3 adjust_request)
    keeps_special_tokens: ClassVar[bool] = False
    # text right after the start marker that names the block and is not reasoning (Gemma 4's
    # `thought\n`); a prompt that ends with the marker and it has opened reasoning
    reasoning_prefix: ClassVar[str] = ""
    # Set True by OutputParser when a tool parser reads this parser's content: a family whose tool
    # calls are messages of its own format (Harmony) then passes them on raw instead of leaving them out.
    tools_follow: bool = False
    # Set by OutputParser with `tools_follow`: the names of the request's tools (Harmony's calls may
    # name one without the `functions.` prefix).
    tool_names: frozenset[str] = frozenset()

    def __init__(self, *, starts_in_reasoning: bool | None, token_markers: frozenset[str]) -> None:
        """`token_markers`: the markers that are single tokens of this tokenizer (fed as marker
        pieces); the others can only appear as plain text and are matched in the text."""

    def follow_tools(self, tool_markers: frozenset[str]) -> None:
        """Told by OutputParser the markers of the request's tool parser (a family whose reasoning
        a tool-call start ends, where the start depends on the tool format, picks its own)."""

    @abstractmethod
    def feed(self, piece: Piece) -> tuple[str, list[Piece]]:
        """Return (reasoning text, content pieces). Content pieces keep their markers so a tool
        parser after this one still sees tool markers by id."""

    @abstractmethod
    def finish(self) -> tuple[str, list[Piece]]:
        """The end of the output: flush everything held back."""

    def steady(self) -> Steady | None:
        """The steady state the parser is in, if any (reasoning, or content passed on as pieces
        unchanged); None: every piece must be fed. Must agree with what `feed` does. Return objects
        the parser keeps (OutputParser caches by their identity)."""
        return None


class ToolParser(ABC):
    """Splits content into plain content and tool-call deltas."""

    names: ClassVar[tuple[str, ...]]
    markers: ClassVar[tuple[str, ...]]
    required_tokens: ClassVar[tuple[str, ...]] = ()
    # A request this family parses does not skip special tokens, whatever it asks (as the peer's
    # adjust_request: the markers are special tokens in many vocabularies). False: the request's
    # skip_special_tokens stands (the markers are still read by id; their text is then empty).
    keeps_special_tokens: ClassVar[bool] = True

    def __init__(
        self,
        *,
        tools: Sequence[ToolSpec],
        token_markers: frozenset[str],
        call_id: Callable[[int], str],
    ) -> None:
        """`call_id(index)` gives the id of the call at that index (deterministic per request)."""

    @abstractmethod
    def feed(self, piece: Piece) -> tuple[str, list[ToolCallDelta]]:
        """Return (content text, tool-call deltas) for the next content piece."""

    @abstractmethod
    def finish(self) -> tuple[str, list[ToolCallDelta]]:
        """The end of the output: flush; an unfinished call is closed as the family's peer does."""

    def steady(self) -> Steady | None:
        """The steady state the parser is in, if any (content, or a call's string argument);
        None: every piece must be fed. Must agree with what `feed` does. Return objects the
        parser keeps (OutputParser caches by their identity)."""
        return None

    @property
    @abstractmethod
    def calls_emitted(self) -> int:
        """How many calls have been emitted (a name sent); drives finish_reason "tool_calls"."""
