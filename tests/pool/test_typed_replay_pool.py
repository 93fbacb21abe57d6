"""Typed output through real worker processes: a pool started with the qwen3 and hermes
parsers, requests whose output holds reasoning and tool calls, a worker SIGKILLed in the middle of
the calls: every request's reasoning, content, tool calls (ids included) and finish equal an
in-process worker's for the same ids, and no request fails."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

import detok
from detok.parsing.registry import ParserConfigError
from detok.parsing.types import ToolSpec
from detok.pool.pool import DetokPool, PoolStartError
from detok.receiver.receiver import DeltaReceiver
from detok.wire.to_workers import EndRequest, Registration
from detok.worker.core import WorkerCore
from tests.helpers.tokenizers_available import qwen3_6_tiktoken
from tests.helpers.typed_helpers import Typed, assemble, run_request

pytestmark = pytest.mark.timeout(240)
TOOLS = (ToolSpec("get_weather", {"type": "object"}), ToolSpec("get_time"))


def _text(i: int) -> str:
    calls = "".join(f'<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "City {i}-{k} 北京", "n": {k}}}}}'
                    f"\n</tool_call>\n" for k in range(1 + i % 3))
    return f"<think>Request {i} thinks 🫨 about it.</think>Answer {i}: {calls}"


def _collect(stream, into: Typed) -> None:  # type: ignore[no-untyped-def]
    delta = stream.take()
    if delta is None:
        return
    into.reasoning += delta.reasoning
    into.content += delta.text
    for d in delta.tool_calls:
        call = into.calls.setdefault(d.index, [None, None, ""])
        if d.id is not None:
            assert call[0] is None, "a call header delivered twice"
            call[0], call[1] = d.id, d.name
        call[2] = str(call[2]) + d.arguments
    if delta.finish is not None:
        into.finish, into.num_calls = delta.finish, delta.calls


def test_sigkill_mid_call_replays_to_the_same_typed_result() -> None:
    tok = detok.load_tokenizer(str(qwen3_6_tiktoken()))
    rids = list(range(500, 540))
    ids = {rid: tok.encode(_text(rid)) for rid in rids}
    with DetokPool(str(qwen3_6_tiktoken()), workers=2, spare=True, reasoning_parser="qwen3", tool_parser="hermes") as pool:
        client = pool.client()
        rx = DeltaReceiver()
        try:
            parsing = pool.output_parsing(TOOLS)
            streams = {rid: rx.open(rid) for rid in rids}
            got = {rid: Typed() for rid in rids}
            for rid in rids:
                client.add_request(Registration(rid, rx.endpoint, [], detok.DecodeParams(), parsing=parsing))
            rng = random.Random(3)
            pos = {rid: 0 for rid in rids}
            victim = pool.pids()[0]
            step = 0
            while pos:
                client.poll()
                rows, starts, counts, tokens, ends = [], [], [], [], []
                for rid, p in list(pos.items()):
                    k = min(rng.randint(1, 4), len(ids[rid]) - p)
                    rows.append(rid), starts.append(p), counts.append(k)
                    tokens.extend(ids[rid][p : p + k])
                    pos[rid] = p + k
                    if pos[rid] == len(ids[rid]):
                        ends.append(EndRequest(rid, "stop", min(tok.eos_token_ids)))
                        del pos[rid]
                client.send_step(rows, tokens, counts, starts=starts, ends=ends)
                if step == 12:  # the first calls are open on every request by now
                    os.kill(victim, signal.SIGKILL)
                step += 1
                rx.poll_blocking(0.005)
                for rid in rids:
                    _collect(streams[rid], got[rid])
            deadline = time.monotonic() + 60
            while any(g.finish is None for g in got.values()) and time.monotonic() < deadline:
                client.poll(0.01)
                rx.poll_blocking(0.01)
                for rid in rids:
                    if got[rid].finish is None:
                        _collect(streams[rid], got[rid])
            assert pool.restarts == 1 and client.replays_sent >= 1
        finally:
            client.close()
            rx.close()
    wrong = []
    for rid in rids:
        want = assemble(run_request(WorkerCore(tok), rid, ids[rid], [len(ids[rid])], parsing,
                                    end=EndRequest(rid, "stop", min(tok.eos_token_ids))), rid)
        g = got[rid]
        assert g.finish is not None and g.finish.reason == "stop", (rid, g.finish)
        if (g.reasoning, g.content, g.calls, g.num_calls) != (want.reasoning, want.content, want.calls, want.num_calls):
            wrong.append(rid)
    assert not wrong, f"{len(wrong)} requests differ, e.g. {wrong[:3]}: {got[wrong[0]] if wrong else ''}"
    assert want.num_calls == 1 + rids[-1] % 3 and want.reasoning.startswith("Request")


def test_pool_refuses_unknown_parsers_and_missing_markers() -> None:
    with pytest.raises(ParserConfigError, match="no_such"):
        DetokPool(str(qwen3_6_tiktoken()), workers=1, spare=False, reasoning_parser="no_such")
    from tests.helpers.tokenizers_available import hf_qwen2_dir

    with pytest.raises(PoolStartError, match=r"\[THINK\]"):
        DetokPool(hf_qwen2_dir(), workers=1, spare=False, reasoning_parser="mistral")
