"""Held steady states on the worker's compiled path (`Steady.held`, detok.stream.typed_fast): a call
decoded once at its end (`keyed_call`: Gemma 4; `pythonic`, `llama4_pythonic`) has the raw bytes of
its plain ids kept by the compiled step and sent as empty rows, and its text fed to the parser in
one piece when the slot leaves the path. The assembled output equals the path that feeds every id
to the parser, for one id per step, any grouping, either `skip_special_tokens`, the numpy step, a
call cut by the end of output, a call held past its bound, and a replay mid-call."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detok.parsing.tools import keyed_call, pythonic
from detok.parsing.types import OutputParsing, ToolSpec
from detok.receiver.typed import TypedState
from detok.stream.typed_fast import TypedFastPath
from detok.stream.typed_stream import TypedStream
from detok.wire.params import DecodeParams
from detok.wire.to_workers import EndRequest
from detok.worker.core import WorkerCore
from tests.helpers.typed_helpers import Typed, assemble, run_request
from tests.parsing import vocabularies

EXAMPLES = int(os.environ.get("DETOK_EXAMPLES", "25"))
TOOLS = (ToolSpec("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}}), ToolSpec("b"))
LONG = "Paris, 北京 and 🫨 are far apart; a long value with words, commas, (parens) and [brackets] in it"
_G_ARGS = '{city:<|"|>' + LONG + '<|"|>,days:3,more:{nested:[1,2,<|"|>x<|"|>]}}'
CASES = {
    "gemma4": ("qwen_gemma4", "gemma4", "gemma4",
               "<|channel>thought\nLet me think.<channel|>Sure.<|tool_call>call:get_weather" + _G_ARGS + "<tool_call|>"
               "<|tool_call>call:b{}<tool_call|>"),
    "gemma4 cut in a call": ("qwen_gemma4", "gemma4", "gemma4",
                             "<|channel>thought\nhm<channel|><|tool_call>call:get_weather{city:<|\"|>" + LONG),
    "llama4_pythonic": ("qwen_llama4", None, "llama4_pythonic",
                        f"<|python_start|>[get_weather(city='{LONG}', days=[1, 2]), b()]<|python_end|>"),
    "pythonic": ("qwen", "olmo3", "pythonic", f"Thinking.</think>[get_weather(city='{LONG}'), b()]"),
    "pythonic not a list of calls": ("qwen", "olmo3", "pythonic", f"Thinking.</think>[get_weather(city={LONG!r}) + 1]"),
}


class _Counts:
    """Entries into a held state, and ids that went through a parsed request's own stream."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.held = self.stream_ids = 0
        enter, step = TypedFastPath._enter_held, TypedStream.step

        def counted_enter(path, *args):  # type: ignore[no-untyped-def]
            self.held += 1
            return enter(path, *args)

        def counted_step(stream, ids):  # type: ignore[no-untyped-def]
            self.stream_ids += len(ids)
            return step(stream, ids)

        monkeypatch.setattr(TypedFastPath, "_enter_held", counted_enter)
        monkeypatch.setattr(TypedStream, "step", counted_step)


_RIDS: Iterator[int] = itertools.count(1)
_CORES: dict[tuple[str, bool, bool, int], WorkerCore] = {}


def _core(tok, vocab: str, fast: bool, compiled: bool = True, which: int = 0) -> WorkerCore:  # type: ignore[no-untyped-def]
    """A long-lived core per vocabulary and path, as a worker is (its modes built once; every
    request a new rid); `which`: another worker of the same kind (a replay's)."""
    key = (vocab, fast, compiled, which)
    core = _CORES.get(key)
    if core is None:
        core = _CORES[key] = WorkerCore(tok)
        core.table.typed_fast = fast
        core.table.compiled = core.table.compiled and compiled
    return core


def _run(tok, case: str, groups: list[int], fast: bool, params: DecodeParams = DecodeParams(),  # type: ignore[no-untyped-def]
         compiled: bool = True, held_limit: int | None = None) -> Typed:
    vocab, reasoning, tool, text = CASES[case]
    core = _core(tok, vocab, fast, compiled) if held_limit is None else WorkerCore(tok)
    if held_limit is not None:
        core.table._typed_path.held_limit = held_limit
    ids = tok.encode(text)
    rid = next(_RIDS)
    batches = run_request(core, rid, ids, groups or [len(ids)], OutputParsing(reasoning, tool, TOOLS, call_id_seed="s"),
                          params, EndRequest(rid, "length"))
    path = core.table._typed_path
    assert not core.live and core.table._typed.fast_slots == 0 and path.held_slots == 0
    assert not any(h is not None for h in path.held)
    return assemble(batches, rid)


@pytest.fixture(scope="module", autouse=True)
def _drop_cores() -> Iterator[None]:
    """The cores go with the module (each holds its vocabulary's tables and modes)."""
    yield
    _CORES.clear()


@pytest.fixture(scope="module", params=sorted(CASES))
def case_tok(request):  # type: ignore[no-untyped-def]
    """(case, its vocabulary)."""
    return request.param, getattr(vocabularies, CASES[request.param][0])()


def test_one_id_per_step_keeps_the_call_on_the_compiled_path(case_tok, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    case, tok = case_tok
    n = len(tok.encode(CASES[case][3]))
    slow = _run(tok, case, [1] * n, fast=False)
    counts = _Counts(monkeypatch)
    fast = _run(tok, case, [1] * n, fast=True)
    assert fast.key() == slow.key()
    assert counts.held >= 1
    # the held text's ids (most of each case) never reach the request's stream
    assert counts.stream_ids <= n // 2, (counts.stream_ids, n)
    entered = counts.held
    numpy = _run(tok, case, [1] * n, fast=True, compiled=False)
    assert numpy.key() == slow.key()
    # a slot's kept bytes bounded (here to a few ids' worth): its stream takes them back and holds anew
    before = counts.held
    assert _run(tok, case, [1] * n, fast=True, held_limit=12).key() == slow.key()
    assert counts.held - before > 2 * entered


@pytest.mark.ci_examples(10)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(groups=st.lists(st.integers(1, 6), max_size=80), skip=st.booleans())
def test_any_grouping_gives_the_slow_paths_result(case_tok, groups, skip) -> None:  # type: ignore[no-untyped-def]
    case, tok = case_tok
    params = DecodeParams(skip_special_tokens=skip)
    want = _run(tok, case, [], fast=False, params=params)
    got = _run(tok, case, groups, fast=True, params=params)
    assert got.key() == want.key()


def test_a_replay_mid_call_gives_the_result_once(case_tok) -> None:  # type: ignore[no-untyped-def]
    case, tok = case_tok
    vocab, reasoning, tool, text = CASES[case]
    ids = tok.encode(text)
    parsing = OutputParsing(reasoning, tool, TOOLS, call_id_seed="s")
    state = TypedState()
    rid = next(_RIDS)
    # the first worker dies inside the held call (its request never ends: a worker of its own);
    # the second gets it all again
    cut = len(ids) * 3 // 4
    first = assemble(run_request(WorkerCore(tok), rid, ids[:cut], [1] * cut, parsing), rid, state)
    again = assemble(run_request(_core(tok, vocab, True, which=1), rid, ids, [1] * len(ids), parsing,
                                 end=EndRequest(rid, "length")), rid, state, first)
    assert again.key() == _run(tok, case, [1] * len(ids), fast=False).key() and state.gaps == 0


@pytest.mark.parametrize("module", [keyed_call, pythonic])
def test_a_call_held_past_its_bound_ends_the_same_on_the_path(module, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Past `MAX_HELD_CALL_CHARS` (made small here) the call ends as its family says (arguments `{}`;
    a list given back as content) whether the text arrived one id at a time or in one piece."""
    case = "gemma4" if module is keyed_call else "pythonic"
    tok = getattr(vocabularies, CASES[case][0])()
    monkeypatch.setattr(module, "MAX_HELD_CALL_CHARS", 40)
    n = len(tok.encode(CASES[case][3]))
    slow = _run(tok, case, [1] * n, fast=False)
    fast = _run(tok, case, [1] * n, fast=True)
    assert fast.key() == slow.key()
    assert (slow.calls[0][2] == "{}") if module is keyed_call else ("get_weather(" in slow.content)
