"""The `think` grammar with `content_drops` (`detok.parsing.family_table`): terminals that wrap the
answer and are dropped from the content, Kimi K3's response channel (`<|open|>response<|sep|>` ...
`<|close|>response<|sep|>`, and `<|close|>message<|sep|>`), as vLLM's kimi_k3 reasoning parser strips
them. They are text of several tokens, cut out of the content by `holdback.MarkerSplitter` (holding
back only a tail that could still become one); other content, marker pieces included, passes on.
"""

from __future__ import annotations

from detok.parsing.holdback import MarkerSplitter
from detok.parsing.reasoning.think import ThinkParser
from detok.parsing.types import KIND_CONTENT, Piece, Steady


_think_feed = ThinkParser.feed


class ContentDroppingThinkParser(ThinkParser):
    content_drops: tuple[str, ...] = ()

    def __init__(self, *, starts_in_reasoning: bool | None, token_markers: frozenset[str]) -> None:
        super().__init__(starts_in_reasoning=starts_in_reasoning, token_markers=token_markers)
        self._drops = MarkerSplitter(self.content_drops)
        self._drop_firsts = "".join(sorted({m[0] for m in self.content_drops}))
        self._content_steadies: dict[int, Steady] = {}  # id(ThinkParser's steady) -> with the drops' triggers

    def feed(self, piece: Piece) -> tuple[str, list[Piece]]:
        reasoning, content = _think_feed(self, piece)  # (no super() lookup: every piece comes here off the compiled path)
        return reasoning, (self._drop(content, False) if content else content)

    def finish(self) -> tuple[str, list[Piece]]:
        reasoning, content = super().finish()
        return reasoning, self._drop(content, True)

    def steady(self) -> Steady | None:
        base = super().steady()
        if base is None or base.kind != KIND_CONTENT:
            return base
        if self._drops.holding:
            return None
        found = self._content_steadies.get(id(base))
        if found is None:
            triggers = "".join(sorted(set(base.triggers + self._drop_firsts)))
            found = self._content_steadies[id(base)] = Steady(KIND_CONTENT, triggers)
        return found

    def _drop(self, content: list[Piece], final: bool) -> list[Piece]:
        if not final and not self._drops.holding:  # the common case: plain text without a drop's start
            firsts = self._drop_firsts
            for piece in content:
                if piece.marker is not None:
                    break
                text = piece.text
                for c in firsts:
                    if c in text:
                        break
                else:
                    continue
                break
            else:
                return content
        out: list[Piece] = []
        for piece in content:
            out.extend(p for p in self._drops.feed(piece) if p.marker not in self.content_drops)
        if final:
            out.extend(self._drops.finish())
        return out
