"""One request's "model" state in the stub: which token comes next and when the request ends.

The rules are a real scheduler's: end-of-sequence and stop token ids end a request with reason
"stop" (never before `min_tokens`, EOS never with `ignore_eos`), `max_tokens` with "length"; the
token that ends it is still sent, as an engine sends its sampled EOS.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from detok.wire.to_scheduler import GenerateRequest
from detok.wire.to_workers import EndRequest
from detok.tokenizer.base import Tokenizer
from scheduler_stub.workload import END, Workload, request_hash


class RequestGeneration:
    __slots__ = ("request", "rid", "_tokens", "generated", "_eos_id", "_stop_ids", "ended", "_counts")

    def __init__(
        self, request: GenerateRequest, workload: Workload, eos_ids: frozenset[int], end_id: int | None = None
    ) -> None:
        self.request = request
        self.rid = request.rid
        self._tokens: Iterator[int] = workload.tokens(request.prompt_ids, request.seed or 0)
        self.generated = 0
        # the id a workload's END becomes: the tokenizer's primary eos id (what a model samples to
        # end, vLLM's `stop_reason: null`), else its smallest eos id, if it has one
        self._eos_id = end_id if end_id is not None else (min(eos_ids) if eos_ids else None)
        self._stop_ids = frozenset(request.params.stop_token_ids) | frozenset(
            request.params.visible_stop_token_ids
        )
        if not request.ignore_eos:
            self._stop_ids |= eos_ids
        self.ended = False
        self._counts: random.Random | None = None  # per-step token counts (--tokens-per-step MIN-MAX)

    def draw_count(self, low: int, high: int) -> int:
        """This step's token count, from the request's own generator (seeded by its prompt and seed)."""
        if self._counts is None:
            self._counts = random.Random(request_hash(self.request.prompt_ids, self.request.seed or 0) ^ 0x5EED)
        return self._counts.randint(low, high)

    def _may_stop(self) -> bool:
        # the token being decided is number generated+1; it may stop only once min_tokens came before it
        return self.generated >= self.request.params.min_tokens

    def next_tokens(self, count: int) -> tuple[list[int], EndRequest | None]:
        """Up to `count` next tokens (several for speculative decoding) and the end they bring."""
        out: list[int] = []
        while len(out) < count:
            token = next(self._tokens)
            if token == END:
                if self.request.ignore_eos or not self._may_stop():
                    continue  # the model was kept from sampling EOS here
                if self._eos_id is None:  # no EOS in this vocabulary: end without a token
                    self.ended = True
                    return out, EndRequest(self.rid, "stop")
                token = self._eos_id
            stops = token in self._stop_ids and self._may_stop()
            out.append(token)
            self.generated += 1
            if stops:
                self.ended = True
                return out, EndRequest(self.rid, "stop", token)
            if self.generated >= self.request.max_tokens:
                self.ended = True
                return out, EndRequest(self.rid, "length")
        return out, None


def primary_eos_id(tok: Tokenizer) -> int | None:
    """The tokenizer's own end-of-sequence id (its `eos` special token), if it is one of its eos ids."""
    eos = tok.special_tokens.eos
    tid = tok.token_to_id(eos) if eos is not None else None
    return tid if tid is not None and tid in tok.eos_token_ids else None
