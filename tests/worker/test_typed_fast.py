"""Typed output on the worker's compiled path (detok.stream.typed_fast): a parsed request's ids that
cannot change its parser's state leave as text rows with a kind, and the assembled reasoning,
content and tool calls are exactly those of the path that feeds every id to the parser, for any
grouping of the ids, on real vocabularies (markers as tokens, and as text on GPT-2)."""

from __future__ import annotations

import functools
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detok.parsing.types import OutputParsing, ToolSpec
from detok.wire.params import DecodeParams
from detok.wire.to_workers import DetokBatch, EndRequest
from detok.worker.core import WorkerCore
from tests.helpers.typed_helpers import Typed, assemble, run_request
from tests.parsing import vocabularies

EXAMPLES = int(os.environ.get("DETOK_EXAMPLES", "25"))
TOOLS = (ToolSpec("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}}), ToolSpec("b"))
THINK = "<think>Let me think: 北京 🫨 is far, \"quoted\" and {braced} [x] <not a tag>.</think>"
# a JSON string as models write code and paths in one: every escape, twice, some back to back
ESCAPED = (r'"line one\nline \"two\" C:\\dir\\file \u00e9\u4eac \t tab \/ \b\f\r end.\n'
           r'line three\n\n\\n \"q\"\"\" \\\" done"')
# a string value as code arrives in one: lines, blank lines, indentation, quotes, backslashes, tabs
VALUE = ('def f(x):\n    """Say "hi" to C:\\dir."""\n\n    return x  # done\n\tend "q" \\n\n'
         'last line, then two newlines\n\nand text  ')
CASES = {
    "qwen3+hermes": ("qwen", "qwen3", "hermes", THINK + 'Answer: <tool_call>\n{"name": "get_weather", "arguments": '
                     '{"city": "Paris 北京 is a long city name", "days": [1, 2]}}\n</tool_call>\n<tool_call>\n{"name": '
                     '"b", "arguments": {}}\n</tool_call>'),
    "qwen3+qwen3_coder": ("qwen", "qwen3", "qwen3_coder", THINK + "Sure.\n<tool_call>\n<function=get_weather>\n"
                          "<parameter=city>\nParis 北京\n</parameter>\n</function>\n</tool_call>"),
    "qwen3+llama3_json": ("qwen", "qwen3", "llama3_json", THINK + '{"name": "get_weather", "parameters": {"city": '
                          '"Paris, the capital"}}'),
    "deepseek_r1+deepseek_v31": ("deepseek", "deepseek_r1", "deepseek_v31", THINK + "Let me call.<｜tool▁calls▁begin｜>"
                                 "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris 北京 far away\"}"
                                 "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    "kimi_k2": ("qwen_kimi", "kimi_k2", "kimi_k2", THINK + "Calling.<|tool_calls_section_begin|><|tool_call_begin|>"
                "functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris and more words\"}<|tool_call_end|>"
                "<|tool_calls_section_end|>"),
    "mistral": ("mistral", "mistral", "mistral", "[THINK]Let me think about 北京 and words.[/THINK]Sure thing. "
                "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris with some words\"}"),
    "gpt2 markers as text": ("gpt2", "qwen3", "hermes", THINK + 'Answer: <tool_call>\n{"name": "get_weather", '
                             '"arguments": {"city": "Paris is a long name"}}\n</tool_call>'),
    "openai_gptoss+openai": ("harmony", "openai_gptoss", "openai",
                             "<|channel|>analysis<|message|>Let me think about 北京 and more.<|end|><|start|>assistant"
                             "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": "
                             "\"Paris and words\"}<|call|><|start|>assistant<|channel|>final<|message|>The answer is "
                             "sunny, with words.<|return|>"),
    # escapes in a JSON string argument, cut anywhere by the vocabularies (a backslash alone, `)\\`,
    # `\\n` ...): the compiled path passes a backslash on and switches to the escape's second mode
    "hermes escapes": ("qwen", "qwen3", "hermes", THINK + '<tool_call>\n{"name": "get_weather", "arguments": {"city": '
                       + ESCAPED + '}}\n</tool_call>'),
    "gpt2 escapes": ("gpt2", "qwen3", "hermes", THINK + '<tool_call>\n{"name": "get_weather", "arguments": {"city": '
                     + ESCAPED + '}}\n</tool_call>'),
    "deepseek escapes": ("deepseek", "deepseek_r1", "deepseek_v31", THINK + "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
                         "get_weather<｜tool▁sep｜>{\"city\": " + ESCAPED + "}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    # not an escape, and output that ends right after a backslash: repaired the same way on both paths
    "invalid escape": ("qwen", "qwen3", "hermes", THINK + '<tool_call>\n{"name": "b", "arguments": {"a": "bad \\x and '
                       'more"}}\n</tool_call>'),
    "ends in a backslash": ("qwen", "qwen3", "hermes", THINK + '<tool_call>\n{"name": "b", "arguments": {"a": "cut \\'),
    # a family's string value: escaped on the way, newlines inside, one held at its end (dropped
    # before `</parameter>`, kept when the value goes on), quotes and backslashes
    "qwen3_coder values": ("qwen", "qwen3", "qwen3_coder", THINK + "<tool_call>\n<function=get_weather>\n"
                           "<parameter=city>\n" + VALUE + "\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
                           "</function>\n</tool_call>"),
    "qwen3_coder cut in a value": ("qwen", "qwen3", "qwen3_coder", THINK + "<tool_call>\n<function=get_weather>\n"
                                   "<parameter=city>\nParis\n\nand more\n"),
    "glm45 values": ("qwen_glm", "qwen3", "glm45", THINK + "<tool_call>get_weather\n<arg_key>city</arg_key>\n"
                     "<arg_value>" + VALUE + "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n"
                     "</tool_call>"),
    "glm45 cut in a value": ("qwen_glm", "qwen3", "glm45", THINK + "<tool_call>get_weather\n<arg_key>city</arg_key>"
                             "<arg_value>Paris \n\n and \nmore\n"),
    "reasoning only": ("qwen", "qwen3", None, THINK + "The answer, with <b>tags</b> and {braces} 🫨."),
}


_CORES: dict[tuple[str, bool], WorkerCore] = {}  # insertion order: the oldest first
_KEPT_CORES = 8


def _core(tok, case: str, fast: bool, compiled: bool = True) -> WorkerCore:  # type: ignore[no-untyped-def]
    """A long-lived core per case and path, as a worker is (its tables and modes built once; the
    request's rid is reused after each run's end); the last _KEPT_CORES used are kept."""
    core = _CORES.pop((case, fast, compiled), None)
    if core is None:
        core = WorkerCore(tok)
        core.table.typed_fast = fast
        if compiled:
            assert core.table.compiled, "the compiled extension is not built"
        core.table.compiled = compiled
        while len(_CORES) >= _KEPT_CORES:
            del _CORES[next(iter(_CORES))]
    _CORES[(case, fast, compiled)] = core
    return core


@functools.cache
def _one_id_per_step_on_the_slow_path(case: str) -> Typed:
    """The reference of the tests that send one id per step with the default parameters (the
    parser fed every id): the same for every path and grouping, so made once per case."""
    tok = getattr(vocabularies, CASES[case][0])()
    return _run(tok, case, [1] * len(tok.encode(CASES[case][3])), fast=False)[0]


def _run(tok, case: str, groups: list[int], fast: bool, params: DecodeParams = DecodeParams()) -> tuple[Typed, int, int]:  # type: ignore[no-untyped-def]
    """(assembled output, rows with a kind, rows) of the case's ids sent in `groups`."""
    _, reasoning, tool, text = CASES[case]
    core = _core(tok, case, fast)
    ids = tok.encode(text)
    parsing = OutputParsing(reasoning, tool, TOOLS if tool else ())
    batches = run_request(core, 7, ids, groups or [len(ids)], parsing, params, EndRequest(7, "length"))
    assert not core.live and core.table._typed.fast_slots == 0
    kinds = sum(sum(1 for k in b.kinds if k) for b in batches)
    rows = sum(len(b.rids) // 8 for b in batches)
    return assemble(batches, 7), kinds, rows


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):  # type: ignore[no-untyped-def]
    return request.param


@pytest.fixture(scope="module")
def tok(case):  # type: ignore[no-untyped-def]
    return getattr(vocabularies, CASES[case][0])()


def test_one_id_per_step_is_mostly_on_the_compiled_path_and_exact(tok, case) -> None:  # type: ignore[no-untyped-def]
    n = len(tok.encode(CASES[case][3]))
    slow = _one_id_per_step_on_the_slow_path(case)
    fast, kinds, rows = _run(tok, case, [1] * n, fast=True)
    assert fast.key() == slow.key()
    assert slow.reasoning and not fast.text
    # most ids are inside reasoning, content or a string argument (measured: 45-85% per case)
    assert kinds / rows >= 0.35, (kinds, rows)


@pytest.mark.ci_examples(10)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(groups=st.lists(st.integers(1, 6), max_size=80), skip=st.booleans())
def test_any_grouping_gives_the_slow_paths_result(tok, case, groups, skip) -> None:  # type: ignore[no-untyped-def]
    params = DecodeParams(skip_special_tokens=skip)
    want, _, _ = _run(tok, case, [], fast=False, params=params)
    got, _, _ = _run(tok, case, groups, fast=True, params=params)
    assert got.key() == want.key()


def test_stop_strings_keep_a_request_off_the_path(tok, case) -> None:  # type: ignore[no-untyped-def]
    n = len(tok.encode(CASES[case][3]))
    params = DecodeParams(stop=["never appears"])
    slow, _, _ = _run(tok, case, [1] * n, fast=False, params=params)
    fast, kinds, _ = _run(tok, case, [1] * n, fast=True, params=params)
    assert kinds == 0 and fast.key() == slow.key()


def test_an_abort_mid_reasoning_frees_the_slot(tok, case) -> None:  # type: ignore[no-untyped-def]
    from detok.parsing.types import OutputParsing as P
    from detok.wire.packing import pack_rids, pack_u32
    from detok.wire.to_workers import Registration
    from tests.helpers.typed_helpers import REPLY_TO

    _, reasoning, tool, text = CASES[case]
    core = WorkerCore(tok)
    ids = tok.encode(text)[:6]
    reg = Registration(9, REPLY_TO, [], DecodeParams(), parsing=P(reasoning, tool, TOOLS if tool else ()))
    core.handle_batch(DetokBatch(1, 0.0, [reg], b"", b"", b"", b"", []))
    for k, i in enumerate(ids):
        core.handle_batch(DetokBatch(2 + k, 0.0, [], pack_rids([9]), pack_u32([k]), b"", pack_u32([i]), []))
    assert core.table._typed.fast_slots == 1  # inside reasoning
    core.handle_batch(DetokBatch(99, 0.0, [], b"", b"", b"", b"", [EndRequest(9, "abort")]))
    assert not core.live and core.table._typed.fast_slots == 0


def test_a_json_strings_escape_pair_of_modes_on_a_real_vocabulary() -> None:
    """The two modes of a JSON string argument (detok.stream.typed_fast): an id ending in an escape's
    backslash is a plain row that switches to the second mode, where only ids completing the escape
    are plain rows (and switch back)."""
    from detok.parsing.types import KIND_ARGUMENTS, Steady
    from detok.stream.table import StreamTable
    from detok.stream.typed_fast import _VocabChars

    tok = vocabularies.qwen()
    table = StreamTable(tok)
    byte_tables = table.plan.tables(True, True)
    chars = _VocabChars(table._tables, byte_tables)
    first, second = chars.escape_pair(Steady(KIND_ARGUMENTS, "<", json_string=True), frozenset())
    slow, shift, slow2, shift2 = first.slow, first.shift, second.slow, second.shift
    one = {t: tok.encode(t) for t in ["\\", "n", '"', " the", "x", "\\n", "u", "<", "abc"]}
    ids = {t: v[0] for t, v in one.items() if len(v) == 1}
    assert {"\\", "n", '"', " the", "\\n"} <= ids.keys()
    assert not slow[ids["\\"]] and shift[ids["\\"]] == 1  # a backslash alone: out, then the second mode
    assert not slow[ids["\\n"]] and shift[ids["\\n"]] == 0  # a whole escape stays in the first
    assert slow[ids['"']] and not slow[ids[" the"]]  # a quote ends the string
    assert not slow2[ids["n"]] and shift2[ids["n"]] == -1  # `\` + `n`: back to the first mode
    assert not slow2[ids['"']] and shift2[ids['"']] == -1  # an escaped quote
    assert not slow2[ids["\\"]] and shift2[ids["\\"]] == -1  # an escaped backslash
    assert slow2[ids[" the"]]  # not an escape: its stream decides (a failed argument)
    if "x" in ids:
        assert slow2[ids["x"]]
    if "<" in ids:
        assert slow[ids["<"]] and slow2[ids["<"]]  # a trigger in either mode


@pytest.mark.parametrize("case", ["gpt2 escapes", "hermes escapes"])
def test_escapes_keep_a_json_string_on_the_compiled_path(case, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from detok.stream.typed_fast import TypedModes

    tok = getattr(vocabularies, CASES[case][0])()
    n = len(tok.encode(CASES[case][3]))
    paired, kinds, rows = _run(tok, case, [1] * n, fast=True)
    # the same with one mode only: every id ending in a backslash, and the next, through the stream
    real_mode = TypedModes.mode
    monkeypatch.setattr(TypedModes, "mode", lambda self, b, s, m: real_mode(self, b, s._replace(triggers=s.triggers + "\\"), m))
    single, kinds_single, _ = _run(tok, case, [1] * n, fast=True)
    assert paired.key() == single.key()
    assert kinds > kinds_single, (kinds, kinds_single, rows)


def test_a_string_values_chain_of_modes_on_a_real_vocabulary() -> None:
    """qwen3_coder's string value (`Steady.value` VALUE_NEWLINE): modes for nothing held and a
    newline held; an id's text goes out as its JSON string body less what is held, and the held text
    goes out (escaped) before the next id's text.
    glm45's (VALUE_VERBATIM) is one mode: it holds nothing."""
    from detok.parsing.types import KIND_ARGUMENTS, VALUE_NEWLINE, VALUE_VERBATIM, Steady
    from detok.stream.table import StreamTable
    from detok.stream.typed_fast import _VocabChars

    tok = vocabularies.qwen_glm()
    table = StreamTable(tok)
    chars = _VocabChars(table._tables, table.plan.tables(True, True))
    none, newline = chars.value_chain(Steady(KIND_ARGUMENTS, "<", value=VALUE_NEWLINE), frozenset())
    ids = {t: v[0] for t in ["\n", " ", '"', " the", "\n\n", ".\n", "<"] if len(v := tok.encode(t)) == 1}
    assert {"\n", " ", '"', " the"} <= ids.keys()
    assert newline.prefix == "\\n" and none.prefixed is None and newline.prefixed is not None
    i = ids[" the"]  # plain text: out as it is; after the held newline, back to the first mode
    assert not none.slow[i] and none.shift[i] == 0 and newline.shift[i] == -1 and newline.prefixed[i]
    assert none.rewrite[ids['"']] == '\\"' and not none.slow[ids['"']]  # escaped on the way
    assert none.shift[ids["\n"]] == 1 and none.rewrite[ids["\n"]] == ""  # held: out with the next id's text
    assert none.shift[ids[" "]] == 0 and not none.slow[ids[" "]]  # a space is not held
    assert not newline.slow[ids["\n"]] and newline.shift[ids["\n"]] == 0  # the held one out, this one held
    if ".\n" in ids:
        assert none.rewrite[ids[".\n"]] == "." and none.shift[ids[".\n"]] == 1
    if "\n\n" in ids:  # the first newline out, the second held
        assert none.rewrite[ids["\n\n"]] == "\\n" and none.shift[ids["\n\n"]] == 1
    if "<" in ids:
        assert none.slow[ids["<"]] and newline.slow[ids["<"]]  # a trigger in every mode
    (verbatim,) = chars.value_chain(Steady(KIND_ARGUMENTS, "<", value=VALUE_VERBATIM), frozenset())
    assert verbatim.prefixed is None and not verbatim.slow[ids["\n"]] and verbatim.shift[ids["\n"]] == 0
    assert verbatim.rewrite[ids["\n"]] == "\\n"  # escaped, not held


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
def test_many_requests_at_once_give_each_the_slow_paths_result(tok, case, compiled) -> None:  # type: ignore[no-untyped-def]
    """Twelve requests of the case at once, one id each per step: more rows than the numpy fallback
    steps row by row, so its gathered path (mode chains, rewritten texts, prefixes) runs as the
    compiled one does; each request's output is that of the path that feeds every id to the parser
    (call ids aside: they derive from the rid)."""
    from detok.wire.packing import pack_rids, pack_u32
    from detok.wire.to_workers import Registration
    from tests.helpers.typed_helpers import REPLY_TO, batches_of

    _, reasoning, tool, text = CASES[case]
    ids = tok.encode(text)
    want = _one_id_per_step_on_the_slow_path(case)
    core = _core(tok, case, True, compiled)  # (the compiled one: the other tests' fast core, its modes built)
    parsing = OutputParsing(reasoning, tool, TOOLS if tool else ())
    rids = list(range(100, 112))
    regs = [Registration(r, REPLY_TO, [], DecodeParams(), parsing=parsing) for r in rids]
    batches = batches_of(core, core.handle_batch(DetokBatch(1, 0.0, regs, b"", b"", b"", b"", [])))
    n = len(rids)
    for k, i in enumerate(ids):
        step = DetokBatch(2 + k, 0.0, [], pack_rids(rids), pack_u32([k] * n), b"", pack_u32([i] * n), [])
        batches += batches_of(core, core.handle_batch(step))
    end = DetokBatch(2 + len(ids), 0.0, [], b"", b"", b"", b"", [EndRequest(r, "length") for r in rids])
    batches += batches_of(core, core.handle_batch(end))
    assert not core.live and core.table._typed.fast_slots == 0
    assert sum(1 for b in batches for k in b.kinds if k) > 0  # the path was taken
    for r in rids:
        got = assemble(batches, r)
        assert _key_without_call_ids(got) == _key_without_call_ids(want), r


def _key_without_call_ids(t: Typed) -> tuple[object, ...]:
    return t.reasoning, t.content, {i: c[1:] for i, c in t.calls.items()}, t.finish, t.num_calls, t.text


def test_a_parser_that_cannot_take_its_state_back_fails_only_its_request(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A slot taken off the compiled path in a mode where the parser holds text (here after a lone
    backslash) whose parser then raises: that request ends with an error, the other goes on exactly."""
    from detok.parsing.tools.json_stream import JsonValueStream
    from detok.wire.packing import pack_rids, pack_u32
    from detok.wire.to_workers import Registration
    from tests.helpers.typed_helpers import REPLY_TO, batches_of

    def refuse(self) -> None:  # type: ignore[no-untyped-def]
        raise RuntimeError("injected")

    monkeypatch.setattr(JsonValueStream, "resume_escaped", refuse)
    tok = vocabularies.gpt2()
    text = CASES["gpt2 escapes"][3]
    ids = tok.encode(text)
    core = WorkerCore(tok)
    parsing = OutputParsing("qwen3", "hermes", TOOLS)
    regs = [Registration(r, REPLY_TO, [], DecodeParams(), parsing=parsing if r == 1 else None) for r in (1, 2)]
    batches = batches_of(core, core.handle_batch(DetokBatch(1, 0.0, regs, b"", b"", b"", b"", [])))
    for k, i in enumerate(ids):
        live = [r for r in (1, 2) if r in core.live]
        batches += batches_of(core, core.handle_batch(DetokBatch(2 + k, 0.0, [], pack_rids(live), pack_u32([k] * len(live)),
                                                                 b"", pack_u32([i] * len(live)), [])))
    batches += batches_of(core, core.handle_batch(DetokBatch(9999, 0.0, [], b"", b"", b"", b"", [EndRequest(2, "length")])))
    failed = assemble(batches, 1)
    assert failed.finish is not None and failed.finish.reason == "error"
    assert "output parsing failed: RuntimeError: injected" in (failed.finish.message or "")
    assert assemble(batches, 2).text == tok.decode(ids)  # the plain request beside it: exact
    assert not core.live and core.table._typed.fast_slots == 0


def test_past_the_mode_bound_requests_stay_off_the_path_and_exact(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """MAX_TYPED_MODES bounds the decode modes (memory) a worker builds for steady states: a state
    that would pass it is decoded through the parser, with the same result."""
    from detok.stream import typed_fast

    tok = vocabularies.qwen()
    case = "hermes escapes"
    _, reasoning, tool, text = CASES[case]
    ids = tok.encode(text)
    want = _one_id_per_step_on_the_slow_path(case)
    # room for the first (reasoning) mode only: none for a chain of up to two after it
    monkeypatch.setattr(typed_fast, "MAX_TYPED_MODES", 2)
    core = WorkerCore(tok)
    batches = run_request(core, 7, ids, [1] * len(ids), OutputParsing(reasoning, tool, TOOLS), DecodeParams(),
                          EndRequest(7, "length"))
    assert core.table._typed.built == 1 and not core.table._typed.held_in  # no chain built
    assert sum(1 for b in batches for k in b.kinds if k) > 0  # reasoning still on the path
    assert assemble(batches, 7).key() == want.key()


# pieces that move the chains (escapes cut anywhere, held whitespace, quotes, markers' first
# characters) and what may follow them, drawn after a prefix that opens a string argument or value
MOVERS = ["\\", "\\\\", '"', '\\"', ")\\", " ", "  ", "\n", "\n\n", " \n", "\t", "<", "</", "u"]
FOLLOWERS = ["n", "u", "00", "e9", "u00e9", "t", "/", '"', "\\", "x", "parameter", ">", "}", "{", "北京", "🫨", " the",
             "word", ",", ":", " ", "\n"]
CHAIN_PIECES = MOVERS + FOLLOWERS
CHAIN_PREFIXES = {
    "hermes": ("qwen", "qwen3", "hermes", '<think>x</think><tool_call>\n{"name": "get_weather", "arguments": {"city": "'),
    "qwen3_coder": ("qwen", "qwen3", "qwen3_coder", "<think>x</think><tool_call>\n<function=get_weather>\n"
                    "<parameter=city>\nv"),
    "glm45": ("qwen_glm", "qwen3", "glm45", "<think>x</think><tool_call>get_weather\n<arg_key>city</arg_key><arg_value>v"),
    "gpt2 hermes": ("gpt2", "qwen3", "hermes", '<think>x</think><tool_call>\n{"name": "get_weather", "arguments": '
                    '{"city": "'),
}


@pytest.mark.parametrize("family", sorted(CHAIN_PREFIXES))
@pytest.mark.ci_examples(20)
@settings(max_examples=EXAMPLES * 2, deadline=None)
@given(pairs=st.lists(st.tuples(st.sampled_from(MOVERS), st.sampled_from(FOLLOWERS)), min_size=3, max_size=15),
       mixed=st.lists(st.sampled_from(CHAIN_PIECES), max_size=20), groups=st.lists(st.integers(1, 3), max_size=40))
def test_random_ids_in_a_string_move_the_chains_exactly(family: str, pairs: list[tuple[str, str]], mixed: list[str],
                                                       groups: list[int]) -> None:
    """Random runs of the ids that move a JSON string's or a value's chain of modes (each piece
    encoded alone: the vocabulary's own ids for it), one per step and in random groups: the
    result is the parser path's."""
    vocab, reasoning, tool, prefix = CHAIN_PREFIXES[family]
    tok = getattr(vocabularies, vocab)()
    pieces = [p for pair in pairs for p in pair] + mixed  # every mover followed, then anything
    ids = tok.encode(prefix) + [i for p in pieces for i in tok.encode(p)]
    parsing = OutputParsing(reasoning, tool, TOOLS)
    results = []
    for fast, cut in ((False, [len(ids)]), (True, [1] * len(ids)), (True, groups)):
        core = _core(tok, f"chains {family}", fast)
        batches = run_request(core, 7, ids, cut, parsing, DecodeParams(), EndRequest(7, "length"))
        assert not core.live and core.table._typed.fast_slots == 0
        results.append(assemble(batches, 7).key())
    assert results[1] == results[0] and results[2] == results[0]
