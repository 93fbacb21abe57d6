"""Every family on the peers' cases (tests/parsing/peer_cases.py: the one source of them, each case
naming its source), on real vocabularies. Per case: the parsed result equals the case's for one id per
step and all ids at once on each vocabulary its file names (the family's own first: markers as
tokens; then markers as text, an older vocabulary), and for random regroupings (also cutting inside
a token's text); in the worker, on the family's own vocabulary, random step sizes, one id per step and
all at once agree, with stop strings on the raw text, and a replay from the start after a cut
mid-output (the request registered again on a worker) gives the same result once."""

from __future__ import annotations

import functools
import itertools
import json
import os
import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detok.parsing.reasoning import FAMILIES as REASONING_FAMILIES
from detok.parsing.output import OutputParser
from detok.parsing.registry import tool_parser_class
from detok.parsing.tools import FAMILIES as TOOL_FAMILIES
from detok.receiver.typed import TypedState
from detok.wire.params import DecodeParams
from detok.wire.to_workers import DetokBatch, EndRequest
from detok.worker.core import WorkerCore
from tests.helpers.parsing_pieces import regroup, run_pieces, single_token, token_pieces
from tests.helpers.tool_pieces import marker_ids
from tests.helpers.typed_helpers import assemble, run_request
from tests.parsing import peer_cases
from tests.parsing.peer_cases import PeerCase, vocabulary
from tests.parsing.test_harmony import assemble as assemble_deltas, parse

EXAMPLES = int(os.environ.get("DETOK_EXAMPLES", "10"))
CASES = peer_cases.load()
ON_VOCABULARIES = [(case, v) for case in CASES for v in case.vocabularies]
_RIDS = itertools.count(1)


@functools.cache
def _core(name: str) -> WorkerCore:
    """A worker per vocabulary, each request a new rid (a replay's: ended first): a WorkerCore
    is costly to build (and each typed request's modes in it) and every request here ends."""
    return WorkerCore(vocabulary(name))


def _arguments(text: str) -> object:
    """A call's arguments as a JSON value; as text where the model's are not JSON (gpt-oss passes a
    body without a JSON content type on as written)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _parse(case: PeerCase, name: str, cut) -> tuple[tuple[str, str, list], list[str]]:  # type: ignore[no-untyped-def]
    """(reasoning, content, calls) and the calls' ids."""
    tok = vocabulary(name)
    op = OutputParser(case.parsing(), single_token(tok))
    ids = tok.encode(case.output)
    reasoning, content, deltas = parse(op, cut(tok, ids, op.marker_ids))
    call_ids = [d.id for d in deltas if d.id is not None]
    return (reasoning, content, [(n, _arguments(a)) for n, a in assemble_deltas(deltas)]), call_ids


def test_every_family_has_cases() -> None:
    named = {c.reasoning_parser for c in CASES} | {c.tool_parser for c in CASES}
    assert {f.names[0] for f in REASONING_FAMILIES + TOOL_FAMILIES} <= named
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("name", "vocab", "markers"), [
    ("deepseek_v31", "deepseek", {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
                                  "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"}),
    ("mistral", "mistral", {"[TOOL_CALLS]"}),  # a control token of Tekken
])
def test_required_markers_are_tokens_of_the_familys_vocabulary(name: str, vocab: str, markers: set[str]) -> None:
    assert set(marker_ids(tool_parser_class(name), vocabulary(vocab)).values()) == markers


@pytest.mark.parametrize(("case", "vocab"), ON_VOCABULARIES, ids=[f"{c.name}-{v}" for c, v in ON_VOCABULARIES])
def test_the_case(case: PeerCase, vocab: str) -> None:
    """One id per step and all ids at once; the vocabulary round-trips the case's text."""
    tok = vocabulary(vocab)
    assert tok.decode(tok.encode(case.output), skip_special_tokens=False) == case.output
    for cut in (token_pieces, run_pieces):
        got, call_ids = _parse(case, vocab, cut)
        assert got == case.want(), (cut.__name__, case.source)
        assert len(set(call_ids)) == len(call_ids)
        if case.call_ids is not None:
            assert tuple(call_ids) == case.call_ids
        if case.call_id_pattern is not None:
            assert all(re.fullmatch(case.call_id_pattern, i) for i in call_ids), call_ids


@settings(max_examples=EXAMPLES, deadline=None)
@given(index=st.integers(0, len(ON_VOCABULARIES) - 1), seed=st.integers(0, 2**32))
def test_any_regrouping_gives_the_case(index: int, seed: int) -> None:
    case, vocab = ON_VOCABULARIES[index]
    rng = random.Random(seed)
    assert _parse(case, vocab, lambda t, i, m: regroup(token_pieces(t, i, m), rng, 0.5))[0] == case.want()


def _key(r):  # type: ignore[no-untyped-def]
    return r.reasoning, r.content, [c[1:] for c in r.calls.values()], r.finish, r.num_calls


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=st.integers(0, len(CASES) - 1), groups=st.lists(st.integers(1, 9), max_size=40),
       stop_at=st.one_of(st.none(), st.integers(0, 10_000)), skip=st.booleans())
def test_the_worker_gives_one_result_for_any_steps(index: int, groups: list[int], stop_at: int | None, skip: bool) -> None:
    """Stop strings apply to the raw text (a stop cut from the output itself, markers included)."""
    case = CASES[index]
    name = case.vocabularies[0]
    ids = vocabulary(name).encode(case.output)
    text = case.output
    # (an empty output has no stop string to cut from it)
    stop = () if stop_at is None or not text else (text[stop_at % len(text) : stop_at % len(text) + 3],)
    params = DecodeParams(stop=stop, skip_special_tokens=skip)
    runs = []
    for g in (groups, [len(ids)], [1] * len(ids)):
        rid = next(_RIDS)
        runs.append(assemble(run_request(_core(name), rid, ids, g, case.parsing(), params, EndRequest(rid, "length")), rid))
    assert _key(runs[0]) == _key(runs[1]) == _key(runs[2])
    # With skip_special_tokens a special token the grammar keeps as text (seed_oss's
    # `<seed:tool_call>` mentioned inside its thought) is not text: the case's strings hold with
    # special tokens kept.
    if not stop and not skip:
        got = runs[2]
        calls = [(c[1], _arguments(str(c[2]))) for c in got.calls.values()]
        assert (got.reasoning, got.content, calls) == case.want()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_replay_mid_output_gives_the_result_once(case: PeerCase) -> None:
    name = case.vocabularies[0]
    ids = vocabulary(name).encode(case.output)
    state = TypedState()
    rid, other = next(_RIDS), next(_RIDS)
    # the output is cut mid-way (what the worker sends after the cut, its end too, never arrives);
    # the request is registered again and gets it all again, from the start
    first = assemble(run_request(_core(name), rid, ids[: len(ids) // 2], [2] * len(ids), case.parsing()), rid, state)
    _core(name).handle_batch(DetokBatch(1, 0.0, [], b"", b"", b"", b"", [EndRequest(rid, "abort")]))  # (lost)
    again = assemble(run_request(_core(name), rid, ids, [3] * len(ids), case.parsing(), end=EndRequest(rid, "length")),
                     rid, state, first)
    whole = assemble(run_request(_core(name), other, ids, [1] * len(ids), case.parsing(),
                                 end=EndRequest(other, "length")), other)
    assert _key(again) == _key(whole) and state.gaps == 0
