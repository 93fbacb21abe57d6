"""SGLang router tokenizer test facts (sgl-router tests/tokenizer_integration.rs, src/tokenizer/stop.rs)
on detok's DecodeStream, with exact text where SGLang asserts a prefix."""

from __future__ import annotations

import pytest

import tests.helpers.parity_cases as pc
from tests.helpers.parity_runner import check_case


@pytest.mark.parametrize("case", pc.SGL_CASES, ids=lambda c: c.name)
def test_sglang_case(case: pc.Case) -> None:
    check_case(case)
