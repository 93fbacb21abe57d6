"""Incremental detokenizers of other serving stacks, re-implemented from their published algorithms.

They are the anchors detok is measured against in `bench/decode.py` (per-token cost) and, through
`bench/baselines_pipeline.py`, in the pool benchmark. Each one has the same tiny interface:

    x = Anchor(hf_tokenizer, prompt_ids, skip_special_tokens)   # prompt_ids: the last few prompt ids
    text = x.step(token_ids)                                    # new text for these ids (maybe "")
    text = x.flush()                                            # what the stream still holds at finish

`hf_tokenizer` is a `tokenizers.Tokenizer` (for a detok tokenizer: `HFTokenizer.hf_tokenizer`). The
window algorithms only call `decode(ids, skip_special_tokens=)` and `decode_batch(...)`, so any
object with those two methods works for them; `HFDecodeStream` needs the real `tokenizers.Tokenizer`.

The oracle they are compared with is docs/tokenizers.md's ("What the text is"): text(G) = D(C +
G)[len(D(C)):]. Where an anchor's published behaviour differs from it, the class docstring says so;
those differences are the point of the comparison, not bugs to fix here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tokenizers.decoders import DecodeStream as _TokenizersDecodeStream

REPLACEMENT = "\ufffd"
# TGI (prefix_offset = input_len - 5), vLLM and SGLang (INIT_INCREMENTAL_DETOKENIZATION_OFFSET) all
# start the window this many prompt tokens back, to defeat decoders that drop a leading space.
PROMPT_WINDOW = 5
# vLLM v1 looks 4..23 prompt tokens back for a suffix that decodes without U+FFFD to prime the stream.
_VLLM_PRIME_MIN, _VLLM_PRIME_MAX = 4, 24
_INVALID_PREFIX = "Invalid prefix encountered"


class NaiveRedecode:
    """(a) Decode the whole output every step and emit what is past the emitted length.

    Holds back while the text ends in U+FFFD (else a completed character would shift every later
    index). O(output length) per token. Differs from the oracle where a decoder's text of a prefix
    is not a prefix of the text of the whole (ByteFallback's run of U+FFFDs, docs/tokenizers.md).
    """

    def __init__(self, hf_tokenizer: Any, prompt_ids: Sequence[int], skip_special_tokens: bool = True) -> None:
        self._tok = hf_tokenizer
        self._skip = skip_special_tokens
        self._ids = list(prompt_ids)
        self._emitted_to = len(self._decode())  # text index up to which output has been emitted

    def _decode(self) -> str:
        return self._tok.decode(self._ids, skip_special_tokens=self._skip)

    def step(self, token_ids: Sequence[int]) -> str:
        self._ids.extend(token_ids)
        text = self._decode()
        if text.endswith(REPLACEMENT):
            return ""
        return self._take(text)

    def flush(self) -> str:
        return self._take(self._decode())

    def _take(self, text: str) -> str:
        new = text[self._emitted_to :]
        self._emitted_to = max(self._emitted_to, len(text))
        return new


class WindowDiff:
    """(b) TGI's `decode_token` / vLLM's slow `detokenize_incrementally`: two decodes per token.

    prefix_text = decode(ids[prefix:read]), new_text = decode(ids[prefix:]); emit the difference
    only when new_text is longer and does not end in U+FFFD, then slide the window (prefix = read,
    read = end). Tokens that decode to "" are held, so the window grows over a run of them (the
    cost SGLang #8031 reports). Both stacks take one id at a time, so `step` loops over the ids.

    flush is ours: vLLM drops what the window still holds and TGI re-decodes the generated ids for
    its final response; here the held tail (e.g. an incomplete character as U+FFFD) is released.
    """

    def __init__(self, hf_tokenizer: Any, prompt_ids: Sequence[int], skip_special_tokens: bool = True) -> None:
        self._tok = hf_tokenizer
        self._skip = skip_special_tokens
        self._ids = list(prompt_ids)
        self._read = len(self._ids)
        self._prefix = max(0, self._read - PROMPT_WINDOW)

    def step(self, token_ids: Sequence[int]) -> str:
        out = []
        decode, skip, ids = self._tok.decode, self._skip, self._ids
        for token_id in token_ids:
            ids.append(token_id)
            prefix_text = decode(ids[self._prefix : self._read], skip_special_tokens=skip)
            new_text = decode(ids[self._prefix :], skip_special_tokens=skip)
            if len(new_text) > len(prefix_text) and not new_text.endswith(REPLACEMENT):
                out.append(new_text[len(prefix_text) :])
                self._prefix, self._read = self._read, len(ids)
        return "".join(out)

    def flush(self) -> str:
        prefix_text = self._tok.decode(self._ids[self._prefix : self._read], skip_special_tokens=self._skip)
        new_text = self._tok.decode(self._ids[self._prefix :], skip_special_tokens=self._skip)
        self._prefix = self._read = len(self._ids)
        return new_text[len(prefix_text) :] if len(new_text) > len(prefix_text) else ""


def _is_cjk(codepoint: int) -> bool:
    # The CJK Unified Ideograph blocks of transformers' TextStreamer, which SGLang reuses.
    return (
        0x4E00 <= codepoint <= 0x9FFF
        or 0x3400 <= codepoint <= 0x4DBF
        or 0x20000 <= codepoint <= 0x2CEAF
        or 0xF900 <= codepoint <= 0xFAFF
        or 0x2F800 <= codepoint <= 0x2FA1F
    )


def find_printable_text(text: str) -> str:
    """SGLang's (from transformers' TextStreamer) rule for what of an unsettled tail to show:
    all of it after a newline or a CJK character, else up to the last space (whole words only)."""
    if text.endswith("\n") or (text and _is_cjk(ord(text[-1]))):
        return text
    if len(text) > 1 and _is_cjk(ord(text[-2])):
        return text[:-1]
    return text[: text.rfind(" ") + 1]


class _SGLangState:
    __slots__ = ("committed", "ids", "surr", "read", "sent")

    def __init__(self, ids: list[int], read: int) -> None:
        self.committed = ""  # SGLang's decoded_text: text settled up to `read`
        self.ids = ids  # prompt tail + output ids
        self.surr = 0
        self.read = read
        self.sent = 0  # chars of committed + printable tail already sent


class SGLangDetokenizer:
    """(c) SGLang's DetokenizerManager.handle_batch_token_id_out: one batch per scheduler step.

    Per request: ids = prompt tail (read offset = its length) + output ids. Each step, two
    `decode_batch` calls over the whole batch: surr = ids[surr:read] and read = ids[surr:]. The new
    text read[len(surr):] is committed (window slides) when non-empty and not ending in U+FFFD;
    otherwise only `find_printable_text` of it is shown. On the finishing step the whole new text is
    sent. Differences from the oracle: SGLang never retracts what it showed of an unsettled tail, so
    where a later token changes that tail (ByteFallback turning a run into U+FFFDs, the retreat of
    SGLang #31598) its stream repeats or loses characters.

    Real SGLang keeps states in a capacity-bounded dict and never drops them on finish; here a
    finished request's state is dropped (same per-step cost, bounded memory in long benchmarks).
    """

    def __init__(self, hf_tokenizer: Any, skip_special_tokens: bool = True) -> None:
        self._tok = hf_tokenizer
        self._skip = skip_special_tokens
        self._states: dict[str, _SGLangState] = {}

    def __len__(self) -> int:
        return len(self._states)

    def step_batch(
        self,
        rids: Sequence[str],
        token_lists: Sequence[Sequence[int]],
        finished: Sequence[bool],
        context_lens: Sequence[int] | None = None,
    ) -> list[str]:
        """New text per request. A rid's first message starts with `context_lens[i]` prompt ids."""
        states = []
        for i, rid in enumerate(rids):
            state = self._states.get(rid)
            if state is None:
                state = _SGLangState(list(token_lists[i]), context_lens[i] if context_lens else 0)
                self._states[rid] = state
            else:
                state.ids.extend(token_lists[i])
            states.append(state)
        surr_texts = self._tok.decode_batch([s.ids[s.surr : s.read] for s in states], skip_special_tokens=self._skip)
        read_texts = self._tok.decode_batch([s.ids[s.surr :] for s in states], skip_special_tokens=self._skip)
        out = []
        for i, state in enumerate(states):
            new_text = read_texts[i][len(surr_texts[i]) :]
            if not finished[i]:
                if new_text and not new_text.endswith(REPLACEMENT):
                    state.committed += new_text
                    state.surr, state.read = state.read, len(state.ids)
                    new_text = ""
                else:
                    new_text = find_printable_text(new_text)
            # As in SGLang: the whole text is rebuilt each step (O(output)) and the send offset
            # follows its length, even backwards, which re-sends text when a shown tail shrinks.
            output_str = state.committed + new_text
            out.append(output_str[state.sent :])
            state.sent = len(output_str)
            if finished[i]:
                del self._states[rids[i]]
        return out


class SGLangIncremental:
    """The SGLang algorithm with the one-request interface (a batch of one per step)."""

    def __init__(self, hf_tokenizer: Any, prompt_ids: Sequence[int], skip_special_tokens: bool = True) -> None:
        self._manager = SGLangDetokenizer(hf_tokenizer, skip_special_tokens)
        self._pending_context: list[int] | None = list(prompt_ids)

    def _send(self, token_ids: Sequence[int], finished: bool) -> str:
        if self._pending_context is not None:
            ids, n_context = self._pending_context + list(token_ids), len(self._pending_context)
            self._pending_context = None
            return self._manager.step_batch(["r"], [ids], [finished], [n_context])[0]
        return self._manager.step_batch(["r"], [token_ids], [finished])[0]

    def step(self, token_ids: Sequence[int]) -> str:
        return self._send(token_ids, finished=False)

    def flush(self) -> str:
        return self._send([], finished=True)


class HFDecodeStream:
    """(d) Hugging Face `tokenizers.decoders.DecodeStream`, as vLLM v1's FastIncrementalDetokenizer
    drives it: primed with the shortest prompt suffix (4..23 ids) that decodes without U+FFFD, then
    stepped one id at a time; an "Invalid prefix" error (non-monotonic decoder output, vLLM #17448)
    resets the stream and retries the id, losing its context as vLLM does.

    flush returns "": DecodeStream has no finish, and vLLM drops incomplete bytes still held.
    """

    def __init__(self, hf_tokenizer: Any, prompt_ids: Sequence[int], skip_special_tokens: bool = True) -> None:
        self._tok = hf_tokenizer
        self._skip = skip_special_tokens
        self._stream = _TokenizersDecodeStream(skip_special_tokens=skip_special_tokens)
        self.resets = 0
        for token_id in self._prime_suffix(list(prompt_ids)):
            self._step_one(token_id)

    def _prime_suffix(self, prompt_ids: list[int]) -> list[int]:
        if len(prompt_ids) > _VLLM_PRIME_MIN:
            for n in range(_VLLM_PRIME_MIN, min(len(prompt_ids) + 1, _VLLM_PRIME_MAX)):
                suffix = prompt_ids[-n:]
                if REPLACEMENT not in self._tok.decode(suffix):
                    return suffix
        return prompt_ids

    def _step_one(self, token_id: int) -> str | None:
        try:
            return self._stream.step(self._tok, token_id)
        except Exception as e:  # tokenizers raises a plain Exception for this
            if _INVALID_PREFIX not in str(e):
                raise
            self.resets += 1
            self._stream = _TokenizersDecodeStream(skip_special_tokens=self._skip)
            return self._stream.step(self._tok, token_id)

    def step(self, token_ids: Sequence[int]) -> str:
        if len(token_ids) == 1:
            return self._step_one(token_ids[0]) or ""
        return "".join(self._step_one(t) or "" for t in token_ids)

    def flush(self) -> str:
        return ""


ANCHORS: dict[str, type] = {
    "naive": NaiveRedecode,
    "window": WindowDiff,
    "sglang": SGLangIncremental,
    "hf-decodestream": HFDecodeStream,
}
