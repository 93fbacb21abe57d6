"""Stop strings across token boundaries, with a jail that holds only a real prefix of a stop string.

Text enters with `feed`; what is certainly not part of a stop string comes out at once. The held
tail is always the longest suffix that is a proper prefix of some stop string, so it is shorter than
the longest stop string and every step costs O(len(longest stop)).
"""

from __future__ import annotations

from collections.abc import Sequence


class StopStringMatcher:
    __slots__ = ("_stops", "_prefixes", "_chars", "_max_hold", "_include", "held", "_blocked")

    def __init__(self, stops: Sequence[str], include_in_output: bool) -> None:
        self._stops = tuple(stops)
        self._prefixes = frozenset(s[:k] for s in self._stops for k in range(1, len(s)))
        self._chars = frozenset("".join(self._stops))
        self._max_hold = max((len(s) for s in self._stops), default=1) - 1
        self._include = include_in_output
        self.held = ""
        self._blocked = 0  # leading chars of `held` that arrived while matches were not allowed

    def feed(self, text: str, allow_match: bool = True) -> tuple[str, str | None]:
        """(text to emit, matched stop string or None). After a match, the matcher is done."""
        if not text:
            return "", None
        s = self.held + text if self.held else text
        if allow_match:
            # a match must end in text that arrived while matches were allowed (min_tokens)
            blocked = self._blocked
            best_end = -1
            best: str | None = None
            for stop in self._stops:
                start = s.find(stop, max(0, blocked - len(stop) + 1)) if blocked else s.find(stop)
                if start >= 0:
                    end = start + len(stop)
                    if best is None or end < best_end:
                        best_end, best = end, stop
            if best is not None:
                self.held = ""
                return (s[:best_end] if self._include else s[: best_end - len(best)]), best
        hold = self._hold_length(s)
        # the blocked chars still held: all of them if matches were not allowed, else the part of
        # the old blocked prefix that stays in the new held tail
        self._blocked = hold if not allow_match else max(0, self._blocked - (len(s) - hold))
        if hold:
            self.held = s[-hold:]
            return s[:-hold], None
        self.held = ""
        return s, None

    def _hold_length(self, s: str) -> int:
        if s[-1] not in self._chars:
            return 0
        prefixes = self._prefixes
        for k in range(min(len(s), self._max_hold), 0, -1):
            if s[-k:] in prefixes:
                return k
        return 0

    def release(self) -> str:
        """End of the request: the held text was not a stop string after all."""
        out, self.held, self._blocked = self.held, "", 0
        return out
