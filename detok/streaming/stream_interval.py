"""`stream_interval` (vLLM's `--stream-interval` and its per-request field): a choice's deltas after
its first text are held until `interval` more output tokens arrived (or it finished), then go out as
one chunk, as vLLM's `RequestState.make_request_output` counts them (tokens since the last chunk
sent, not steps: a step of several tokens counts as that many). A delta without a running count
(a hand-made message, a worker that sends none) counts as one token."""

from __future__ import annotations

from detok.receiver.receiver import RequestDelta
from detok.receiver.token_logprobs import TokenLogprobs
from detok.receiver.typed import join_calls


def joined(pending: list[RequestDelta]) -> RequestDelta:
    """Several waiting deltas of one choice as one: texts concatenated, logprob entries joined."""
    if len(pending) == 1:
        return pending[0]
    runs = [d.logprobs for d in pending if d.logprobs is not None]
    last = pending[-1]
    logprobs = TokenLogprobs.concat(runs) if runs else None
    calls = tuple(c for d in pending for c in d.tool_calls)
    return RequestDelta("".join(d.text for d in pending), last.finish, last.num_tokens, logprobs,
                        "".join(d.reasoning for d in pending), tuple(join_calls(list(calls))), last.calls)


def effective_interval(server: int, request: int) -> int:
    """A request's own stream_interval may only raise the server's (vLLM clamps a lower one up)."""
    return max(server, request)


def _has_output(delta: RequestDelta) -> bool:
    return bool(delta.text or delta.logprobs is not None or delta.reasoning or delta.tool_calls)


class ChunkInterval:
    """Per choice of a response: which deltas go out now, joined, and which wait."""

    def __init__(self, interval: int, choices: int) -> None:
        self.interval = interval
        self._held: list[list[RequestDelta]] = [[] for _ in range(choices)]
        self._sent_first = [interval <= 1] * choices  # the first text goes out at once: time to first token
        self._sent_tokens = [0] * choices  # output tokens up to the last chunk sent (vLLM's sent_tokens_offset)
        self._tokens = [0] * choices  # output tokens so far

    def _count(self, index: int, delta: RequestDelta) -> int:
        n = delta.num_tokens if delta.num_tokens is not None else self._tokens[index] + 1
        self._tokens[index] = n
        return n

    def take(self, index: int, delta: RequestDelta) -> RequestDelta | None:
        """The delta to send for this arrival (several joined), or None while it waits."""
        if not self._sent_first[index]:
            n = self._count(index, delta)
            if _has_output(delta):
                self._sent_first[index] = True
                self._sent_tokens[index] = n
            return delta
        if self.interval <= 1:
            return delta
        pending = self._held[index]
        pending.append(delta)
        n = self._count(index, delta)
        if delta.finish is None and n - self._sent_tokens[index] < self.interval:
            return None
        self._sent_tokens[index] = n
        out = joined(pending)
        pending.clear()
        return out
