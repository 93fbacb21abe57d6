"""Stop strings across token boundaries, with a jail that holds only a real prefix of a stop string.

Text enters with `feed`; what is certainly not part of a stop string comes out at once. The held
tail is always the longest suffix of the text that is a proper prefix of some stop string.

Memory is linear in the stop strings' total length and freed with the last request using them:
each stop string keeps a Knuth-Morris-Pratt failure table (4 bytes per char, filled lazily, only as
far as text has actually matched that stop), shared by every live request with the same stop list;
each request keeps one integer per stop string, the length of the longest suffix of its text that
is a prefix of that stop. Holding back is then the largest of those states, and a match is a state
reaching the stop's length: amortized O(number of stops) per char, and a stop whose state is 0 and
whose first char is not in the new text is skipped with one `str.__contains__` (C speed), which is
the common case.

Semantics: the earliest-ending match wins (ties: list order); text from the match on is dropped
(kept through the match with `include_in_output`); a match may only end in text that arrived while
matches were allowed (`min_tokens`): text fed with `allow_match=False` only advances the states (a
full match there falls back to the stop's longest proper border, as KMP does after a match).
"""

from __future__ import annotations

import weakref
from array import array
from collections.abc import Sequence


class _Stop:
    """One stop string and its KMP failure table, computed on demand.

    `fail[i]` is the length of the longest proper border of `text[: i + 1]`. Entries are added as
    states reach them, so a stop that the text never follows costs its string and nothing more."""

    __slots__ = ("fail", "first", "length", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.first = text[0]
        self.length = len(text)
        self.fail = array("I", [0])

    def border(self, q: int) -> int:
        """fail[q - 1]: the state to fall back to from state q (1 <= q <= length)."""
        fail = self.fail
        if len(fail) < q:
            self._extend(q)
        return fail[q - 1]

    def _extend(self, q: int) -> None:
        fail, p = self.fail, self.text
        k = fail[-1]
        for i in range(len(fail), q):
            c = p[i]
            while k and p[k] != c:
                k = fail[k - 1]
            if p[k] == c:
                k += 1
            fail.append(k)


class _StopSet:
    """The compiled stop strings of one stop list, shared by the requests that use it."""

    __slots__ = ("__weakref__", "firsts", "firsts_text", "stops")

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = tuple(_Stop(s) for s in stops)
        self.firsts = frozenset(s.first for s in self.stops)
        self.firsts_text = "".join(sorted(self.firsts))


# Live stop lists by value: requests with identical lists share their tables; an entry goes away
# with the last request holding it, so the cache is bounded by what live requests hold.
_SHARED: weakref.WeakValueDictionary[tuple[str, ...], _StopSet] = weakref.WeakValueDictionary()


def _compiled(stops: tuple[str, ...]) -> _StopSet:
    found = _SHARED.get(stops)
    if found is None:
        found = _SHARED[stops] = _StopSet(stops)
    return found


def _advance(stop: _Stop, q: int, text: str, end: int, allow_match: bool) -> tuple[int, int]:
    """Run state q of `stop` over text[:end]. Returns (new state, index just past the first match)
    when matches are allowed and one ends there, else (new state, -1)."""
    p, m, first = stop.text, stop.length, stop.first
    i = 0
    while i < end:
        if q == 0:
            i = text.find(first, i, end)
            if i < 0:
                return 0, -1
            q = 1
        else:
            c = text[i]
            while q and p[q] != c:
                q = stop.border(q)
            if p[q] == c:
                q += 1
        i += 1
        if q == m:
            if allow_match:
                return q, i
            q = stop.border(m)
    return q, -1


class StopStringMatcher:
    __slots__ = ("_include", "_set", "_states", "held")

    def __init__(self, stops: Sequence[str], include_in_output: bool) -> None:
        self._set = _compiled(tuple(stops))
        self._states = [0] * len(self._set.stops)
        self._include = include_in_output
        self.held = ""

    @property
    def idle(self) -> bool:
        """No stop string is partly matched (nothing held): text with none of `firsts` leaves it so."""
        return not any(self._states)

    @property
    def firsts(self) -> frozenset[str]:
        """The first characters of the stop strings."""
        return self._set.firsts  # type: ignore[no-any-return]

    @property
    def firsts_text(self) -> str:
        """The same, as one str (sorted)."""
        return self._set.firsts_text  # type: ignore[no-any-return]

    def feed(self, text: str, allow_match: bool = True) -> tuple[str, str | None]:
        """(text to emit, matched stop string or None). After a match, the matcher is done."""
        if not text:
            return "", None
        states = self._states
        if not any(states) and self._set.firsts.isdisjoint(text):
            out, self.held = self.held + text, ""  # nothing here can begin a stop string
            return out, None
        best, best_end = -1, len(text) + 1
        for k, stop in enumerate(self._set.stops):
            q = states[k]
            if q == 0 and stop.first not in text:
                continue
            # a later stop in the list wins only by ending strictly earlier
            q, end = _advance(stop, q, text, min(len(text), best_end - 1), allow_match)
            states[k] = q
            if end >= 0:
                best, best_end = k, end
        s = self.held + text
        if best >= 0:
            stop = self._set.stops[best].text
            cut = len(self.held) + best_end
            self.held = ""
            self._states = [0] * len(states)
            return (s[:cut] if self._include else s[: cut - len(stop)]), stop
        hold = max(states)
        if hold:
            self.held = s[-hold:]
            return s[:-hold], None
        self.held = ""
        return s, None

    def release(self) -> str:
        """End of the request: the held text was not a stop string after all."""
        out, self.held = self.held, ""
        self._states = [0] * len(self._states)
        return out
