"""The per-id tables (every id's bytes and text, per decode mode) stay out of the cycle collector's
walk: a list of them is walked (and the cache evicted) at each full collection of the process,
and a worker builds a decode mode's tables after it froze its start-up heap, at the first request
that asks for that mode (as tuples, a full collection skips what lists would make it walk)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import tests.helpers.stream_roster as stream_roster
from detok import DecodeParams
from detok.stream.table import StreamTable

_MODES = [DecodeParams(), DecodeParams(skip_special_tokens=False),
          DecodeParams(skip_special_tokens=False, spaces_between_special_tokens=False)]


def _vocab_sized_tracked(vocab: int, before: set[int]) -> list[tuple[str, int]]:
    """Containers of text or bytes tracked by the collector, made since `before`, about as long
    as the vocabulary (the tables' Delta caches, a list of None / Delta per id filled as ids are
    met, hold neither; nor do the slot lists)."""
    found = []
    for obj in gc.get_objects():
        if id(obj) in before or not isinstance(obj, (list, tuple, dict)) or len(obj) < vocab // 2:
            continue
        if any(isinstance(x, (str, bytes)) for x in (obj.values() if isinstance(obj, dict) else obj)):
            found.append((type(obj).__name__, len(obj)))
    return found


@pytest.mark.parametrize("name", ["qwen2", "llama3-tiktoken", "mistral-tekken", "spm-botchan-bpe", "gguf-gpt-2"])
def test_decode_tables_are_not_walked_by_the_collector(name: str) -> None:
    tok = stream_roster.get(name)
    gc.collect()
    before = {id(o) for o in gc.get_objects()}
    decoding = tok.byte_decoding()
    assert decoding is not None
    table = StreamTable(tok)
    ids = tok.encode(" hello world, again")
    for rid, params in enumerate(_MODES):  # each mode's tables built as a request first asks for it
        table.open(rid, ids[:2], params, ignore_eos=True)
    rids = np.arange(len(_MODES), dtype="<u8").tobytes()
    for t, token in enumerate(ids):
        table.step_packed(rids, np.full(len(_MODES), t, dtype="<u4").tobytes(), b"",
                          np.full(len(_MODES), token, dtype="<u4").tobytes(), row_texts=True)
    gc.collect()  # (a tuple of atomic objects is untracked at the first collection that sees it)
    assert not gc.is_tracked(decoding.pieces)
    assert _vocab_sized_tracked(len(decoding.pieces), before) == []
    for rid in range(len(_MODES)):
        table.finish(rid, "length")


def test_a_per_id_list_is_what_the_check_finds() -> None:
    """The check above can fail: a per-id list of str is found."""
    tok = stream_roster.get("qwen2")
    gc.collect()
    before = {id(o) for o in gc.get_objects()}
    texts = [f"t{i}" for i in range(1000)]
    assert _vocab_sized_tracked(1000, before) == [("list", 1000)]
    del texts
