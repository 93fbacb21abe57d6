"""StopStringMatcher against a brute-force reference: every feed's output, the match and the held
text, for random stop lists over small alphabets (overlaps, borders, repeats), random chunkings and
min_tokens-style blocked feeds; and memory that stays linear in the stop strings' length."""

from __future__ import annotations

import gc
import os
import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from detok.stream import stop_strings
from detok.stream.stop_strings import StopStringMatcher

EXAMPLES = int(os.environ.get("DETOK_EXAMPLES", "40")) * 10


def _hold(text: str, stops: list[str]) -> int:
    """Longest suffix of `text` that is a proper prefix of some stop string."""
    best = 0
    for s in stops:
        for k in range(1, min(len(s) - 1, len(text)) + 1):
            if text.endswith(s[:k]):
                best = max(best, k)
    return best


def reference(stops: list[str], feeds: list[tuple[str, bool]], include: bool) -> list[tuple[str, str | None]]:
    """Per feed: (text emitted, matched stop). A match is the earliest-ending occurrence of any
    stop string (ties: list order) whose last char arrived in an allowed feed."""
    text = ""
    emitted = 0
    out: list[tuple[str, str | None]] = []
    for chunk, allow in feeds:
        if not chunk:
            out.append(("", None))
            continue
        base = len(text)
        text += chunk
        if allow:
            for end in range(base + 1, len(text) + 1):
                hit = next((s for s in stops if end >= len(s) and text[end - len(s) : end] == s), None)
                if hit is not None:
                    cut = end if include else end - len(hit)
                    assert cut >= emitted  # the jail never let part of a match out
                    out.append((text[emitted:cut], hit))
                    return out
        keep = len(text) - _hold(text, stops)
        out.append((text[emitted:keep], None))
        emitted = keep
    return out


def _run(matcher: StopStringMatcher, feeds: list[tuple[str, bool]], stops: list[str]) -> list[tuple[str, str | None]]:
    got = []
    seen = ""
    for chunk, allow in feeds:
        got.append(matcher.feed(chunk, allow))
        if got[-1][1] is not None:
            return got
        seen += chunk
        # the jail holds exactly the longest suffix that is a proper prefix of a stop string
        assert matcher.held == seen[len(seen) - _hold(seen, stops):] if _hold(seen, stops) else matcher.held == ""
    return got


alphabet = st.sampled_from(["ab", "abc", "a", "北京欢"])


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data(), letters=alphabet, include=st.booleans())
def test_matches_the_brute_force_reference(data: st.DataObject, letters: str, include: bool) -> None:
    chars = st.sampled_from(letters)
    stops = data.draw(st.lists(st.text(chars, min_size=1, max_size=7), min_size=1, max_size=4))
    feeds = data.draw(st.lists(st.tuples(st.text(chars, max_size=9), st.booleans()), min_size=1, max_size=8))
    matcher = StopStringMatcher(stops, include)
    assert _run(matcher, feeds, stops) == reference(stops, feeds, include)


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data(), include=st.booleans())
def test_min_tokens_boundary(data: st.DataObject, include: bool) -> None:
    """Blocked feeds first (min_tokens not reached), then allowed ones: a match straddling the
    boundary counts only if its last char came after it."""
    chars = st.sampled_from("ab")
    stops = data.draw(st.lists(st.text(chars, min_size=1, max_size=6), min_size=1, max_size=3))
    blocked = data.draw(st.lists(st.text(chars, min_size=1, max_size=6), min_size=1, max_size=4))
    allowed = data.draw(st.lists(st.text(chars, min_size=1, max_size=6), min_size=1, max_size=4))
    feeds = [(c, False) for c in blocked] + [(c, True) for c in allowed]
    matcher = StopStringMatcher(stops, include)
    assert _run(matcher, feeds, stops) == reference(stops, feeds, include)


def test_release_returns_the_held_text_and_resets() -> None:
    m = StopStringMatcher(["world!"], False)
    assert m.feed("Hello wor") == ("Hello ", None)
    assert m.feed("ld") == ("", None) and m.held == "world"
    assert m.release() == "world" and m.held == ""
    assert m.feed("!") == ("!", None)  # nothing of the old prefix remains


def test_memory_is_linear_in_the_stop_strings_and_freed_with_the_last_user() -> None:
    """64 stop strings of 1024 CJK chars: the old prefix set took ~73 MB per request. Text that
    follows a stop string a long way fills its table (4 bytes per char)."""
    stops = ["".join(chr(0x4E00 + (i * 7919 + j * 104729) % 20000) for j in range(1024)) for i in range(64)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        matchers = [StopStringMatcher(list(stops), False) for _ in range(4)]  # same list: shared tables
        matchers.append(StopStringMatcher([s + "x" for s in stops], False))  # another list
        for m in matchers:
            for s in stops[:8]:
                m.feed(s[:1000])  # far into a stop string, no match
                m.feed("。")
        used = tracemalloc.get_traced_memory()[0] - before
        assert used < 2 * 1024 * 1024, used  # two stop lists of 64K chars each, tables included
        assert len(stop_strings._SHARED) == 2
        del matchers, m
        gc.collect()
        assert len(stop_strings._SHARED) == 0  # freed with the last request holding them
    finally:
        tracemalloc.stop()
