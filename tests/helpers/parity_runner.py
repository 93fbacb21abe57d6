"""Runs a `parity_cases.Case` through detok's DecodeStream (and the worker's StreamTable)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import tokenizers
from tokenizers import decoders, models

import detok
import tests.helpers.stream_roster as stream_roster
from detok import DecodeParams, Finish
from detok.tokenizer.base import Tokenizer
from tests.helpers.parity_cases import Case
from tests.helpers.stream_helpers import run_stream


def _from_hf(hf: tokenizers.Tokenizer) -> Tokenizer:
    folder = Path(tempfile.mkdtemp(prefix="detok-parity-"))
    atexit.register(shutil.rmtree, folder, True)
    (folder / "tokenizer.json").write_text(hf.to_str(), encoding="utf-8")
    return detok.load_tokenizer(str(folder))


def _added_words() -> Tokenizer:
    hf = tokenizers.Tokenizer(models.BPE())
    hf.add_tokens(["my", "name", "is", "john"])
    return _from_hf(hf)


def _unigram(vocab: list[tuple[str, float]], byte_fallback: bool, decoder: decoders.Decoder) -> Tokenizer:
    hf = tokenizers.Tokenizer(models.Unigram(vocab, 0, byte_fallback=byte_fallback))
    hf.decoder = decoder
    return _from_hf(hf)


_BUILT = {
    "hf-added-words": _added_words,
    "hf-unigram-bytefallback": lambda: _unigram(
        [("<unk>", 0.0), ("<0x20>", -0.1), ("<0xC3>", -0.2), ("<0xA9>", -0.3)], True, decoders.ByteFallback()
    ),
    "hf-unigram-metaspace": lambda: _unigram([("<unk>", 0.0), ("\u2581This", -0.1)], False, decoders.Metaspace()),
}
_cache: dict[str, Tokenizer] = {}


def tokenizer(name: str) -> Tokenizer:
    if name not in _cache:
        _cache[name] = _BUILT[name]() if name in _BUILT else stream_roster.get(name)
    return _cache[name]


def _one_id(tok: Tokenizer, text: str) -> int:
    ids = tok.encode(text)
    if len(ids) != 1:
        tid = tok.token_to_id(text)
        assert tid is not None, f"{text!r} is not one token"
        return tid
    return ids[0]


def case_ids(case: Case, tok: Tokenizer) -> tuple[list[int], list[int]]:
    """(prompt ids, output ids) of a case."""
    if case.prompt_tokens is not None:
        ids = tok.encode(str(case.output))
        return ids[: case.prompt_tokens], ids[case.prompt_tokens :]
    if case.joint:
        prompt = tok.encode(str(case.prompt))
        ids = tok.encode(str(case.prompt) + str(case.output))
        assert ids[: len(prompt)] == prompt
        return prompt, ids[len(prompt) :]
    prompt = list(case.prompt) if isinstance(case.prompt, tuple) else tok.encode(case.prompt) if case.prompt else []
    output = list(case.output) if isinstance(case.output, tuple) else tok.encode(case.output)
    return prompt, output


def case_params(case: Case, tok: Tokenizer) -> DecodeParams:
    params = dict(case.params)
    for key in ("stop_token_ids", "visible_stop_token_ids"):
        if key in params:
            params[key] = tuple(_one_id(tok, v) if isinstance(v, str) else v for v in params[key])
    return DecodeParams(**params)


def expected_finish(case: Case, tok: Tokenizer) -> Finish | None:
    if case.finish is None:
        return None
    reason, matched = case.finish
    stop_ids = case.params.get("stop_token_ids", ()) + case.params.get("visible_stop_token_ids", ())
    if isinstance(matched, str) and (matched in stop_ids or (not case.ignore_eos and matched == tok.special_tokens.eos)):
        matched = _one_id(tok, matched)
    return Finish(reason, matched)  # type: ignore[arg-type]


def stream_deltas(
    tok: Tokenizer, prompt: Sequence[int], output: Sequence[int], params: DecodeParams, steps: Sequence[int],
    ignore_eos: bool = True,
) -> tuple[list[str], Finish | None]:
    """Each step's text (steps of the given sizes, cycled; 0: everything at once), then the finish's
    text if the stream did not finish on its own."""
    groups = [size or max(len(output), 1) for size in steps]
    return run_stream(tok, prompt, output, params, groups, ignore_eos=ignore_eos)


def matches(deltas: list[str], want: str | tuple[str, ...]) -> bool:
    if isinstance(want, str):
        return "".join(deltas) == want
    return deltas[: len(want)] == list(want) and "".join(deltas[len(want) :]) == ""


def check_case(case: Case) -> None:
    """detok gives the peer's expected text and finish, or, where it deliberately differs, its own
    documented text (and then not the peer's)."""
    tok = tokenizer(case.tokenizer)
    prompt, output = case_ids(case, tok)
    params = case_params(case, tok)
    deltas, finish = stream_deltas(tok, prompt, output, params, case.steps, case.ignore_eos)
    if case.differs is None:
        assert matches(deltas, case.expected), (deltas, case.expected)
    else:
        assert case.detok_expected is not None
        assert matches(deltas, case.detok_expected), (deltas, case.detok_expected)
        assert not matches(deltas, case.expected)
    want_finish = expected_finish(case, tok)
    if want_finish is not None:
        assert finish == want_finish, (finish, want_finish)
