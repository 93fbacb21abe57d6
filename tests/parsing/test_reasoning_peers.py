"""The peers' reasoning cases (tests/parsing/reasoning_cases.py) on real vocabularies, fed as a worker
feeds them: one piece per id, and one piece per run between marker ids; both give the peer's result."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from detok.parsing.registry import reasoning_parser_class
from detok.parsing.types import Piece
from detok.tokenizer.base import Tokenizer
from tests.helpers.parsing_pieces import feed_all, marker_ids, run_pieces, token_pieces
from tests.parsing import reasoning_cases as rc
from tests.parsing import vocabularies as voc

# family -> (cases, vocabularies it runs on: real markers as tokens, and gpt2 with markers as text)
MATRIX: dict[str, tuple[list[rc.Case], list[Callable[[], Tokenizer]]]] = {
    "deepseek_r1": (rc.DEEPSEEK_R1, [voc.deepseek, voc.qwen, voc.gpt2]),
    "qwen3": (rc.QWEN3, [voc.qwen, voc.deepseek, voc.gpt2]),
    # GLM's markers are Qwen's strings (no GLM vocabulary here); Kimi's section marker added to Qwen's
    "glm45": (rc.GLM45, [voc.qwen, voc.gpt2]),
    "kimi_k2": (rc.KIMI_K2, [voc.qwen_kimi, voc.gpt2]),
    "mistral": (rc.MISTRAL, [voc.mistral]),
    # the table families (detok.parsing.family_tables)
    "seed_oss": (rc.SEED_OSS, [voc.qwen_seed, voc.gpt2]),
    "nemotron_v3": (rc.NEMOTRON_V3, [voc.qwen, voc.gpt2]),
    "olmo3": (rc.OLMO3, [voc.qwen, voc.gpt2]),
    "minimax_m2": (rc.MINIMAX_M2, [voc.qwen, voc.gpt2]),
    "deepseek_v3": (rc.DEEPSEEK_V3, [voc.deepseek, voc.gpt2]),
    "gemma4": (rc.GEMMA4, [voc.qwen_gemma4, voc.gpt2]),
    "kimi_k3": (rc.KIMI_K3, [voc.qwen_k3, voc.gpt2]),
    "step3p5": (rc.STEP3P5, [voc.qwen, voc.gpt2]),
}


def _params() -> list[object]:
    out = []
    for family, (cases, vocabs) in MATRIX.items():
        for case in cases:
            for vocab in vocabs:
                out.append(pytest.param(family, case, vocab, id=f"{family}-{case.id}-{vocab.__name__}"))
    return out


def run_case(family: str, case: rc.Case, tok: Tokenizer, cut: Callable[..., list[Piece]]) -> tuple[str, str]:
    cls = reasoning_parser_class(family)
    markers = marker_ids(tok, cls.markers)
    ids = tok.encode(case.output)
    assert tok.decode(ids, skip_special_tokens=False) == case.output  # the vocabulary round-trips the case
    parser = cls(starts_in_reasoning=case.starts, token_markers=frozenset(markers.values()))
    reasoning, content = feed_all(parser, cut(tok, ids, markers))
    return reasoning, "".join(p.text for p in content)


@pytest.mark.parametrize("family,case,vocab", _params())
@pytest.mark.parametrize("cut", [token_pieces, run_pieces], ids=["per_token", "per_run"])
def test_peer_case(family: str, case: rc.Case, vocab: Callable[[], Tokenizer], cut: Callable[..., list[Piece]]) -> None:
    assert run_case(family, case, vocab(), cut) == (case.reasoning, case.content)


def test_every_family_has_cases() -> None:
    from detok.parsing.reasoning import FAMILIES
    from detok.parsing.reasoning.think import ThinkParser

    # the marker families here; openai_gptoss (Harmony) in test_harmony.py
    assert {f.names[0] for f in FAMILIES if issubclass(f, ThinkParser)} == set(MATRIX)
