"""The table families (`detok.parsing.family_tables`) on the peers' cases (tests/parsing/cases/*.json,
each case naming its source), on real vocabularies: Qwen3.6's (`<think>`, `<tool_call>` one token each),
DeepSeek's (its `｜DSML｜` one token), and Qwen3.6's with Seed-OSS's, Llama 4's, Gemma 4's or Kimi K3's markers added. A case
may carry its own `tools` (a schema that types its values). Per case: the parsed result equals the case's
for one id per step, all ids at once and random regroupings (also cutting inside a token's text); in
the worker, random step sizes, one id per step and all at once agree, with stop strings on the raw
text, and a replay from the start on a fresh worker after a cut mid-output gives the same result once."""

from __future__ import annotations

import functools
import itertools
import json
import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detok.parsing.family_tables import REASONING_TABLES, TOOL_TABLES
from detok.parsing.output import OutputParser
from detok.parsing.types import OutputParsing, ToolSpec
from detok.receiver.typed import TypedState
from detok.wire.params import DecodeParams
from detok.wire.to_workers import EndRequest
from detok.worker.core import WorkerCore
from tests.helpers.parsing_pieces import regroup, run_pieces, single_token, token_pieces
from tests.helpers.typed_helpers import assemble, run_request
from tests.parsing import vocabularies as voc
from tests.parsing.test_harmony import assemble as assemble_deltas, parse

EXAMPLES = int(os.environ.get("DETOK_EXAMPLES", "10"))
CASES_DIR = Path(__file__).parent / "cases"
TOOLS = (ToolSpec("get_weather", {"type": "object", "properties": {"location": {"type": "string"},
                                                                   "unit": {"type": "string"}}}),)
# the vocabulary each family's cases run on
VOCABULARY = {"seed_oss": voc.qwen_seed, "deepseek_v3": voc.deepseek, "llama4_pythonic": voc.qwen_llama4,
              "deepseek_v32": voc.deepseek, "deepseek_v4": voc.deepseek, "gemma4": voc.qwen_gemma4, "kimi_k3": voc.qwen_k3,
              "deepseek_r1": voc.deepseek, "deepseek_v31": voc.deepseek, "glm45": voc.qwen_glm,
              "kimi_k2": voc.qwen_kimi, "mistral": voc.mistral, "llama3_json": voc.llama31,
              "openai_gptoss": voc.harmony, "openai": voc.harmony}


_RIDS = itertools.count(1)


@functools.cache
def _core(family: str, which: int = 0) -> WorkerCore:
    """A worker per vocabulary (`which`: a second one, for replays), each request a new rid: a
    WorkerCore is costly to build and every request here ends."""
    return WorkerCore(_tok(family))


def _load() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(CASES_DIR.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        out += [(data["family"], case) for case in data["cases"]]
    return out


CASES = _load()
IDS = [f"{family}-{case['id']}" for family, case in CASES]


def _tools(case: dict) -> tuple[ToolSpec, ...]:
    """The case's own tools (a schema that types its values), else `TOOLS`."""
    if not case["tool_parser"]:
        return ()
    if "tools" in case:
        return tuple(ToolSpec(t["name"], t["parameters"]) for t in case["tools"])
    return TOOLS


def _parsing(case: dict, seed: str = "s") -> OutputParsing:
    return OutputParsing(case["reasoning_parser"], case["tool_parser"], _tools(case), case.get("starts_in_reasoning"),
                         call_id_seed=seed)


def _tok(family: str):  # type: ignore[no-untyped-def]
    return VOCABULARY.get(family, voc.qwen)()


def _parse(family: str, case: dict, cut) -> tuple[str, str, list]:  # type: ignore[no-untyped-def]
    tok = _tok(family)
    op = OutputParser(_parsing(case), single_token(tok))
    reasoning, content, deltas = parse(op, cut(tok, tok.encode(case["output"]), op.marker_ids))
    return reasoning, content, [(n, _arguments(a)) for n, a in assemble_deltas(deltas)]


def _arguments(text: str) -> object:
    """A call's arguments as a JSON value; as text where the model's are not JSON (gpt-oss passes a
    body without a JSON content type on as written)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _want(case: dict) -> tuple[str, str, list]:
    return case["reasoning"], case["content"], [tuple(c) for c in case["calls"]]


def test_every_table_family_has_cases() -> None:
    families = {family for family, _ in CASES}
    assert {t.names[0] for t in REASONING_TABLES + TOOL_TABLES} <= families


@pytest.mark.parametrize(("family", "case"), CASES, ids=IDS)
@pytest.mark.parametrize("cut", [token_pieces, run_pieces], ids=["one_id_per_step", "all_at_once"])
def test_the_case(family: str, case: dict, cut) -> None:  # type: ignore[no-untyped-def]
    assert _parse(family, case, cut) == _want(case), case["source"]


@settings(max_examples=EXAMPLES, deadline=None)
@given(index=st.integers(0, len(CASES) - 1), seed=st.integers(0, 2**32))
def test_any_regrouping_gives_the_case(index: int, seed: int) -> None:
    family, case = CASES[index]
    rng = random.Random(seed)
    assert _parse(family, case, lambda t, i, m: regroup(token_pieces(t, i, m), rng, 0.5)) == _want(case)


def _key(r):  # type: ignore[no-untyped-def]
    return r.reasoning, r.content, [c[1:] for c in r.calls.values()], r.finish, r.num_calls


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=st.integers(0, len(CASES) - 1), groups=st.lists(st.integers(1, 9), max_size=40),
       stop_at=st.one_of(st.none(), st.integers(0, 10_000)), skip=st.booleans())
def test_the_worker_gives_one_result_for_any_steps(index: int, groups: list[int], stop_at: int | None, skip: bool) -> None:
    """Stop strings apply to the raw text (a stop cut from the output itself, markers included)."""
    family, case = CASES[index]
    tok = _tok(family)
    ids = tok.encode(case["output"])
    text = case["output"]
    # (an empty output has no stop string to cut from it)
    stop = () if stop_at is None or not text else (text[stop_at % len(text) : stop_at % len(text) + 3],)
    params = DecodeParams(stop=stop, skip_special_tokens=skip)
    runs = []
    for g in (groups, [len(ids)], [1] * len(ids)):
        rid = next(_RIDS)
        runs.append(assemble(run_request(_core(family), rid, ids, g, _parsing(case), params, EndRequest(rid, "length")), rid))
    assert _key(runs[0]) == _key(runs[1]) == _key(runs[2])
    # With skip_special_tokens a special token the grammar keeps as text (seed_oss's
    # `<seed:tool_call>` mentioned inside its thought) is not text: the case's strings hold with
    # special tokens kept.
    if not stop and not skip:
        got = runs[2]
        calls = [(c[1], _arguments(str(c[2]))) for c in got.calls.values()]
        assert (got.reasoning, got.content, calls) == _want(case)


@pytest.mark.parametrize(("family", "case"), CASES, ids=IDS)
def test_a_replay_mid_output_gives_the_result_once(family: str, case: dict) -> None:
    tok = _tok(family)
    ids = tok.encode(case["output"])
    state = TypedState()
    rid, other = next(_RIDS), next(_RIDS)
    # the first worker dies mid-output (its request is never ended); the second gets it all again
    first = assemble(run_request(WorkerCore(tok), rid, ids[: len(ids) // 2], [2] * len(ids), _parsing(case)), rid, state)
    again = assemble(run_request(_core(family, 1), rid, ids, [3] * len(ids), _parsing(case), end=EndRequest(rid, "length")),
                     rid, state, first)
    whole = assemble(run_request(_core(family), other, ids, [1] * len(ids), _parsing(case),
                                 end=EndRequest(other, "length")), other)
    assert _key(again) == _key(whole) and state.gaps == 0
