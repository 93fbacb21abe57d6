"""Hugging Face tokenizers' DecodeStream test facts (bindings/python/tests/bindings/test_tokenizer.py)
on detok's DecodeStream; the deliberate differences are marked in tests/helpers/parity_cases.py."""

from __future__ import annotations

import pytest

import tests.helpers.parity_cases as pc
from tests.helpers.parity_runner import check_case


@pytest.mark.parametrize("case", pc.HF_CASES, ids=lambda c: c.name)
def test_hf_decode_stream_case(case: pc.Case) -> None:
    check_case(case)
