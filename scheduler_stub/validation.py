"""What the stub accepts from a frontend: values its own code and the pool can handle.

The frontend validates every client value first (a 400 there); this is the stub's own guard, since
any frontend - buggy, older, or hostile on the request socket - may send anything the wire format
allows. A request failing these checks is finished with an error at its frontend; nothing a
frontend sends stops the stub's loop.
"""

from __future__ import annotations

from typing import Final

from detok.wire.endpoints import endpoint_error
from detok.wire.to_scheduler import GenerateRequest

MAX_RID: Final = 2**63 - 1  # rids are unsigned 63-bit (detok.wire), packed as uint64
MIN_SEED: Final = -(2**63)  # seeds are signed 64-bit, as vLLM's `seed`
MAX_SEED: Final = 2**63 - 1


def rid_error(rid: int) -> str | None:
    if not 0 <= rid <= MAX_RID:
        return f"rid {rid} is outside [0, {MAX_RID}]"
    return None


def request_error(request: GenerateRequest) -> str | None:
    """Why the stub cannot run `request` (None if it can)."""
    error = rid_error(request.rid)
    if error is not None:
        return error
    if request.seed is not None and not MIN_SEED <= request.seed <= MAX_SEED:
        return f"seed {request.seed} is outside the signed 64-bit range [{MIN_SEED}, {MAX_SEED}]"
    error = endpoint_error(request.reply_to)
    if error is not None:
        return f"reply_to: {error}"
    return None
