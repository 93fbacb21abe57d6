"""What the streamed-chunk path reads of a response and of its choices. `detok.api.responses`
makes them (`ResponseContext`, `ChoiceState`, `TypedChoice`); the chunk path sees them through
these protocols, so it sits below the API layer and never imports it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from detok.receiver.request_stream import RequestDelta
    from detok.streaming.latency import RequestTimer


class StreamedResponse(Protocol):
    """A response's settings and the writer of its body (`ResponseContext`)."""

    kind: Literal["completion", "chat"]
    logprobs: int | None
    continuous_usage: bool
    stream_interval: int
    return_token_ids: bool
    tokens_as_ids: bool
    completed: bool  # built to its end (not cut short by its client)
    direct: Any  # the connection's writer while the body streams straight to it (`DirectWriter`), or None

    @property
    def opens_at_once(self) -> bool: ...


class TypedFields(Protocol):
    """A parsed chat choice's streamed fields (`TypedChoice`)."""

    field: str
    include_reasoning: bool
    parallel: bool
    sent_args: dict[int, int]


class StreamedChoice(Protocol):
    """One choice's state while it streams (`ChoiceState`)."""

    ids: list[int] | None
    timer: RequestTimer
    typed: TypedFields | None

    def logprobs(self, delta: RequestDelta) -> Any: ...

    def token_ids(self, delta: RequestDelta) -> Any: ...

    def running_usage(self, ctx: Any, delta: RequestDelta | None = None) -> Any: ...
