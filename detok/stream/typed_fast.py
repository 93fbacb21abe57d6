"""Typed output on the table's compiled plain path: a parsed request in a steady state (inside
reasoning, in content, inside a JSON string argument; `Steady`) has most of its ids decoded like a
plain request's, with no Python per token.

Why it is exact: in a steady state the parser passes a plain piece on unchanged, as one kind of
output, and keeps its state, as long as the piece holds none of the state's trigger characters (the
first characters of the markers it matches in text; in a JSON string, what is not a complete
escape). So the slot gets a decode mode of its own in which every id that could change that - a
marker id, an id whose bytes hold a trigger character, and (inside a JSON string) an id that is not
whole printable characters or holds a quote or backslash that is not a complete escape - is never a
plain row: such an id goes to the request's `TypedStream` as before, which first takes back what
the compiled path decoded (`TypedStream.absorb_fast`). Stop strings and
`min_tokens` keep a typed request off this path (its `_plain` is False; plain requests with them
have their own way onto the compiled step, `detok.stream.stop_marks`).

A JSON string's escapes are often cut by the vocabulary (`\\` then `n`, `)\\` then `"`): such a
string has two modes (`ModeTables.restricted_chain`). An id ending in an escape's backslash is a
plain row after which the compiled step puts the slot in the second mode, where only ids that
complete the escape are plain rows (and put it back); the JSON stream passes a backslash on at once
either way (`JsonValueStream`), and a slot taken off in the second mode tells it so
(`TypedStream.absorb_fast`, with the text the parser holds in that mode).

A call that its family holds to its end and decodes once (`Steady.held`: gemma4's arguments, a
pythonic list) has no output to stream: the parser only holds such text, the same text joined or
in pieces. Its slot gets the restricted mode of those triggers and a bytearray in
`TypedFastPath.held`: the compiled step appends each plain row's token bytes to it and sends the row
empty, and `leave` hands the bytes to the stream (`TypedStream.absorb_held`), which decodes them
once and feeds the parser one piece.

While on the path, the slot's char-offset column counts the text of that kind (the offset the
receiver de-duplicates on) and its tag carries the kind in bits 30-31; `StreamTable.step_packed`
turns those bits into the step's `kinds` column (1 reasoning, 2 content, 3 arguments of the last
call opened) and clears them from the tags, so the rows leave as text rows with a kind
(`DeltaBatch.kinds`), and the receiver adds them to the request's typed output.
"""

from __future__ import annotations

import itertools
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from detok.parsing.limits import MAX_HELD_CALL_CHARS
from detok.parsing.tools.schema_values import json_string_body
from detok.parsing.tools.value_holds import HOLDS, SPACE
from detok.parsing.types import JSON_STRING_TEXT, VALUE_NEWLINE, VALUE_VERBATIM, Steady
from detok.stream.byte_text import ByteTables
from detok.stream.mode_tables import ModeBlock, ModeSpec, ModeTables
from detok.stream.columns import PENDING_WIDTH as _MAX_PENDING
from detok.stream.columns import NOT_PLAIN as _NOT_PLAIN

if TYPE_CHECKING:
    from detok.stream.typed_stream import TypedStream
    from detok.stream.columns import StreamColumns

KIND_SHIFT = 30
TAG_MASK = (1 << KIND_SHIFT) - 1  # the caller's tags stay below this (Frontends' tags do)
_ESCAPED = '"\\/bfnrtu'  # what may follow a JSON string's backslash
# decode modes built for steady states at most (each one record per vocabulary id: 4 MB for 250K
# ids); a state whose modes would pass it stays off the path
MAX_TYPED_MODES = 64


class TypedModes:
    """The decode modes of typed requests' steady states, each built once (vectorised: a few
    milliseconds for a 250K vocabulary, at the first request in that state)."""

    def __init__(self, tables: ModeTables) -> None:
        self._tables = tables
        self._modes: dict[tuple[int, str, bool, str, frozenset[int]], int | None] = {}  # None: over the bound
        self._chars: dict[int, _VocabChars] = {}
        self.fast_slots = 0  # slots on the path now
        self.built = 0  # modes built (MAX_TYPED_MODES)
        self.held_in: dict[int, str] = {}  # a chain's mode -> the text the parser holds in it (see `mode`)

    def mode(self, byte_tables: ByteTables, steady: Steady, markers: frozenset[int]) -> int | None:
        key = (id(byte_tables), steady.triggers, steady.json_string, steady.value, markers)
        mode = self._modes.get(key, -1)
        if mode == -1:
            if self.built + _CHAIN_MAX > MAX_TYPED_MODES:
                return None
            chars = self._chars.get(id(byte_tables))
            if chars is None:
                chars = self._chars[id(byte_tables)] = _VocabChars.of(self._tables, byte_tables)
            if steady.value or (steady.json_string and "\\" not in steady.triggers):
                # a chain of modes: after a JSON string's backslash passed on, or after the
                # whitespace a string value holds back
                if steady.value:
                    chain, held = chars.value_chain(steady, markers), _HELD[steady.value]
                else:
                    chain, held = chars.escape_pair(steady, markers), ("", "\\")
                mode = self._tables.restricted_chain(byte_tables, chain, key)
                self.held_in.update({mode + k: h for k, h in enumerate(held) if h})
                self.built += len(chain)
            else:
                mode = self._tables.restricted_mode(byte_tables, ModeSpec(chars.slow_ids(steady, markers)), key)
                self.built += 1
            self._modes[key] = mode
        return mode


class _VocabChars:
    """A vocabulary's whole-character texts (one decode mode's) as one array of code points, each
    with the id it belongs to: which ids hold a character is then one `isin`."""

    def __init__(self, tables: ModeTables, byte_tables: ByteTables) -> None:
        block = tables.block_of(byte_tables)  # (the base mode's records: its span of `tables`)
        self.vocab = block.vocab
        self.whole = block.whole
        texts = block.texts
        joined = "".join(itertools.compress(texts, self.whole))
        self.codes = np.frombuffer(joined.encode("utf-32-le"), dtype="<u4")
        self.lengths = block.lengths
        lengths = self.lengths[self.whole]
        self.owner = np.repeat(np.flatnonzero(self.whole), lengths)
        # each non-empty whole id's first char in `codes`, and its length
        self.starts = (np.cumsum(lengths) - lengths)[lengths > 0]
        self.lengths_nonempty = lengths[lengths > 0]
        self.pieces = block.pieces
        self.texts = texts
        for array in (self.owner, self.starts, self.lengths_nonempty):
            array.flags.writeable = False

    @classmethod
    def of(cls, tables: ModeTables, byte_tables: ByteTables) -> _VocabChars:
        """The tables' characters, made once per mode block (derived from it alone, read-only):
        shared by every StreamTable of the tokenizer."""
        block = tables.block_of(byte_tables)
        chars = _CHARS.get(block)
        if chars is None:
            chars = _CHARS[block] = cls(tables, byte_tables)
        return chars

    def ids_with(self, codes: list[int]) -> np.ndarray:
        return np.unique(self.owner[np.isin(self.codes, codes)])

    def escape_pair(self, steady: Steady, markers: frozenset[int]) -> list[ModeSpec]:
        """A JSON string's two modes: as `slow_ids`, except that an id
        whose text ends in an unfinished escape's backslash (`\\`, `ab\\`) is a plain row too, after
        which the slot is in the second mode, where the backslash is out and the next id's text
        must complete the escape (`n`, `"quoted`, `u00e9 more`) and then be a JSON string's text;
        such an id switches back, or, ending in a backslash of its own, stays."""
        vocab = self.vocab
        base = self._base_slow(steady, markers)
        texts = self.texts
        to_escaped = np.zeros(vocab, dtype=bool)
        slow = base.copy()
        quoted = self.ids_with([ord('"'), ord("\\")])
        for i in quoted.tolist():
            t: str = texts[i]  # type: ignore[assignment]
            if JSON_STRING_TEXT.fullmatch(t):
                continue
            if t.endswith("\\") and JSON_STRING_TEXT.fullmatch(t, 0, len(t) - 1):
                to_escaped[i] = True
            else:
                slow[i] = True
        # the second mode: only ids that start by completing the escape; one of `/bfnrt` and no
        # quote or backslash after it completes it and is string text (most of them: no regex)
        firsts = self.codes[self.starts]
        owners = self.owner[self.starts]
        back = np.zeros(vocab, dtype=bool)
        stay = np.zeros(vocab, dtype=bool)
        back[owners[np.isin(firsts, [ord(c) for c in "/bfnrt"])]] = True
        back[quoted] = False
        back &= ~base
        cands = np.union1d(owners[np.isin(firsts, [ord(c) for c in '"\\u'])], quoted)
        for i in cands[~base[cands]].tolist():
            t = "\\" + texts[i]  # type: ignore[operator]
            if JSON_STRING_TEXT.fullmatch(t):
                back[i] = True
            elif t.endswith("\\") and JSON_STRING_TEXT.fullmatch(t, 0, len(t) - 1):
                stay[i] = True
        shift_plain = to_escaped.astype(np.int8) * (~slow)
        return [ModeSpec(slow, shift_plain), ModeSpec(~(back | stay), -back.astype(np.int8))]

    def value_chain(self, steady: Steady, markers: frozenset[int]) -> list[ModeSpec]:
        """A family's string value's modes (`Steady.value`), one per text it may hold at its end
        (`_HELD`: nothing, and a newline for qwen3_coder's VALUE_NEWLINE; glm45's VALUE_VERBATIM
        holds nothing, one mode): an id's text goes out as its JSON
        string body less what the family then holds, which decides the next mode; in a mode
        holding text, that text goes out first (escaped; a prefix flag), unless the id has no
        text. Holding anything else (a run of whitespace) is an id for the request's stream."""
        held_texts = _HELD[steady.value]
        base = self._base_slow(steady._replace(json_string=False), markers) | ~self.whole
        empty = self.whole & (self.lengths == 0)  # no text: nothing goes out, the mode stays
        # the ids whose text changes or ends in whitespace: a few thousand to look at one by one;
        # any other id's text goes out as it is and holds nothing
        odd = [c for c in np.unique(self.codes).tolist() if c in (34, 92) or not chr(c).isprintable()]
        ends = self.codes[self.starts + self.lengths_nonempty - 1]
        look = np.union1d(self.ids_with(odd), self.owner[self.starts][np.isin(ends, [ord(c) for c in SPACE])])
        look = look[~base[look]]
        rewrite: dict[int, str] = {}
        specs = []
        texts = self.texts
        for k, held in enumerate(held_texts):
            slow = base.copy()
            shift = np.full(self.vocab, -k, dtype=np.int8)  # to the first mode: nothing held after
            shift[empty] = 0
            for i in look.tolist():
                step = _value_step(steady.value, texts[i], held)  # type: ignore[arg-type]
                if step is None:
                    slow[i] = True
                    continue
                emit, after = step
                if emit != texts[i]:
                    rewrite[i] = emit  # (the same in every mode where it is defined)
                shift[i] = held_texts.index(after) - k
            shift[slow] = 0
            prefix = json_string_body(held)
            specs.append(ModeSpec(slow, shift, rewrite, prefix, ~slow & ~empty if held else None))
        return specs

    def _base_slow(self, steady: Steady, markers: frozenset[int]) -> np.ndarray:
        """Markers, trigger characters, and in a JSON string ids of partial or unprintable characters."""
        slow = np.zeros(self.vocab, dtype=bool)
        ids = [i for i in markers if 0 <= i < self.vocab]
        if ids:
            slow[ids] = True
        triggers = sorted({ord(c) for c in steady.triggers})
        if triggers:
            slow[self.ids_with(triggers)] = True
        partial = ~self.whole
        if steady.json_string or any(c > 127 for c in triggers):
            slow |= partial
        elif triggers:
            wanted = [bytes([c]) for c in triggers]
            pieces = self.pieces
            hit = [i for i in np.flatnonzero(partial).tolist() if any(b in pieces[i] for b in wanted)]
            slow[hit] = True
        if steady.json_string:
            unique = np.unique(self.codes).tolist()
            slow[self.ids_with([c for c in unique if not chr(c).isprintable()])] = True
        return slow

    def slow_ids(self, steady: Steady, markers: frozenset[int]) -> np.ndarray:
        """Per id: True if the id must go to the request's stream in this steady state."""
        slow = self._base_slow(steady, markers)
        if steady.json_string:
            # a quote or backslash: fast only as complete escapes (a few thousand ids to look at)
            texts = self.texts
            hit = [i for i in self.ids_with([ord('"'), ord("\\")]).tolist()
                   if not JSON_STRING_TEXT.fullmatch(texts[i])]  # type: ignore[arg-type]
            slow[hit] = True
        return slow


_CHARS: weakref.WeakKeyDictionary[ModeBlock, _VocabChars] = weakref.WeakKeyDictionary()

# what a family's string value may hold at its end while on the compiled path, by `Steady.value`
_HELD = {VALUE_NEWLINE: ("", "\n"), VALUE_VERBATIM: ("",)}
_CHAIN_MAX = 2  # the longest chain of modes a steady state needs


def _value_step(hold: str, text: str, held: str) -> tuple[str, str] | None:
    """A string value's text `text` fed while `held` is held back, by the family's own rule
    (`value_holds`): (what goes out after the held text, escaped; what is held after it), or None
    when that is not one of `_HELD[hold]` (the stream's to keep)."""
    if not text:
        return "", held
    out, after = HOLDS[hold](text, held)
    if after not in _HELD[hold]:
        return None
    return json_string_body(out[len(held) :]), after


class TypedFastPath:
    """`StreamTable`'s side of the path: a typed stream's slot put on it (`enter`, after the stream
    stepped) and taken off (`leave`, before it steps), in the table's columns."""

    def __init__(self, columns: StreamColumns, typed: TypedModes, eos: frozenset[int], strategy: Any) -> None:
        self.columns, self._typed, self._eos, self._strategy = columns, typed, eos, strategy
        # per slot: the raw bytes kept for a slot in a held steady state (`Steady.held`), else None;
        # the compiled step appends a plain row's bytes to its slot's and sends the row empty
        self.held: list[bytearray | None] = []
        self.held_slots = 0  # slots in a held state now (the step is given `held` only then)
        # bytes kept per slot at most: a fuller slot's next row goes to its stream, which takes the
        # bytes back (its parser applies its own bound to the text) and starts an empty buffer
        self.held_limit = MAX_HELD_CALL_CHARS

    def enter(self, slot: int, stream: TypedStream) -> None:
        state = stream.steady_text()
        if state is None or not stream._stop_ids <= self._eos or self._strategy == "window":
            return
        steady, index, offset = state
        dec = stream._raw._dec
        held = dec._pending
        if len(held) >= _MAX_PENDING or (held and steady.value):  # (a value's text is rewritten: whole only)
            return
        mode = self._typed.mode(dec._t, steady, stream._parser.marker_set)
        if mode is None:
            return
        if steady.held:
            self._enter_held(slot, stream, mode, held)
            return
        self.columns.v_mode[slot] = mode
        self.columns.v_expect[slot] = self.columns.v_ntok[slot] = stream.num_tokens
        self.columns.v_choff[slot] = offset
        self.columns.v_eos_stops[slot] = bool(stream._stop_ids)
        self.columns.v_pend_len[slot] = len(held)
        if held:
            self.columns.pend[slot, : len(held)] = np.frombuffer(held, dtype=np.uint8)
        self.columns.v_tag[slot] = (self.columns.v_tag[slot] & TAG_MASK) | (steady.kind << KIND_SHIFT)
        stream._fast_at = (steady.kind, index, offset)
        self._typed.fast_slots += 1

    def _enter_held(self, slot: int, stream: TypedStream, mode: int, held: bytes) -> None:
        """The slot's rows in `mode` go out empty, their bytes kept in `held[slot]` (after the
        bytes of an incomplete character the stream held), for the stream at `leave`."""
        if slot >= len(self.held):
            self.held.extend([None] * (len(self.columns) - len(self.held)))
        self.held[slot] = bytearray(held)
        self.held_slots += 1
        self.columns.v_mode[slot] = mode
        self.columns.v_expect[slot] = self.columns.v_ntok[slot] = stream.num_tokens
        self.columns.v_choff[slot] = stream.char_offset
        self.columns.v_eos_stops[slot] = bool(stream._stop_ids)
        self.columns.v_pend_len[slot] = 0
        self.columns.v_tag[slot] &= TAG_MASK
        stream._fast_at = (0, -1, 0)
        self._typed.fast_slots += 1

    def leave(self, slot: int, stream: TypedStream) -> None:
        if self.held_slots and slot < len(self.held) and self.held[slot] is not None:
            data = bytes(self.held[slot])  # type: ignore[arg-type]
            self.drop(slot)
            self._typed.fast_slots -= 1
            self.columns.v_expect[slot] = _NOT_PLAIN
            stream.absorb_held(data, self.columns.v_ntok[slot])
            self.columns.v_choff[slot] = stream.char_offset
            return
        n = self.columns.v_pend_len[slot]
        held = self.columns.pend[slot, :n].tobytes() if n else b""
        offset = stream._fast_at[2]  # type: ignore[index]
        held_text = self._typed.held_in.get(self.columns.v_mode[slot], "")
        stream.absorb_fast(self.columns.v_choff[slot] - offset, self.columns.v_ntok[slot], held, held_text)
        self._typed.fast_slots -= 1
        self.columns.v_expect[slot] = _NOT_PLAIN
        self.columns.v_pend_len[slot] = 0  # (held by the stream now)
        self.columns.v_choff[slot] = stream.char_offset
        self.columns.v_tag[slot] &= TAG_MASK

    def drop(self, slot: int) -> None:
        """The slot leaves the path (or closes): no bytes are kept for it any more."""
        if self.held_slots and slot < len(self.held) and self.held[slot] is not None:
            self.held[slot] = None
            self.held_slots -= 1

    def kinds(self, tags: bytes) -> tuple[bytes, bytes]:
        """(tags without kind bits, kinds: uint8 per row, empty if none) of a step's rows."""
        tag_a = np.frombuffer(tags, dtype="<u4")
        kinds = (tag_a >> KIND_SHIFT).astype(np.uint8)
        if not kinds.any():
            return tags, b""
        return (tag_a & TAG_MASK).astype("<u4").tobytes(), kinds.tobytes()

