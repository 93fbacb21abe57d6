"""The echo workload: the stub "generates" the last user message of a chat request (the prompt of a
completion), so any model output - reasoning markers, tool calls, Harmony channels - can be driven
through the whole stack over HTTP and parsed by the workers as a real model's would be.

The stub gets only prompt ids. It decodes them (special tokens kept) and finds the last user turn
with the served chat template: rendering probe conversations gives the text that opens a user
message (the longest common suffix of what precedes it in two different histories) and the text
that closes it (the longest common prefix of what follows it), and the generation prompt (what
`add_generation_prompt` appends). The message ends at the LAST close before the generation prompt: a
close may be a bare `\n` that a multi-line message holds too. Without a template, or when no user
turn is found (a completion's prompt), the whole prompt is echoed. The text is encoded with special
and added tokens recognised (`<think>` becomes its id), then END.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from detok.tokenizer.base import Tokenizer
from scheduler_stub.workload import END, Workload

_PROBE = "\u2063ECHOPROBE\u2063"


def _common_suffix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return a[len(a) - n :]


def _common_prefix(a: str, b: str) -> str:
    return os.path.commonprefix([a, b])


class UserTurn(NamedTuple):
    """The texts around a user message in a rendered prompt."""

    opening: str
    closing: str
    generation: str  # what add_generation_prompt appends after the last message


def user_turn_markers(tok: Tokenizer) -> UserTurn | None:
    """The texts opening and closing a user message and the generation prompt, or None."""
    if tok.chat_template is None:
        return None
    try:
        alone = tok.apply_chat_template([{"role": "user", "content": _PROBE}], add_generation_prompt=False)
        later = tok.apply_chat_template(
            [{"role": "system", "content": "s"}, {"role": "user", "content": "a"},
             {"role": "assistant", "content": "b"}, {"role": "user", "content": _PROBE}],
            add_generation_prompt=False)
        replied = tok.apply_chat_template(
            [{"role": "user", "content": _PROBE}, {"role": "assistant", "content": "b"}], add_generation_prompt=False)
        asking = tok.apply_chat_template([{"role": "user", "content": _PROBE}], add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - a template that cannot render the probes: echo whole prompts
        return None
    if _PROBE not in alone or _PROBE not in later or _PROBE not in replied:
        return None
    opening = _common_suffix(alone[: alone.index(_PROBE)], later[: later.rindex(_PROBE)])
    closing = _common_prefix(alone[alone.index(_PROBE) + len(_PROBE) :], replied[replied.index(_PROBE) + len(_PROBE) :])
    generation = asking[len(alone) :] if asking.startswith(alone) else ""
    return UserTurn(opening, closing, generation) if opening else None


def echo_text(prompt: str, markers: UserTurn | None) -> str:
    """The last user message of a rendered prompt (or the whole prompt)."""
    if markers is None:
        return prompt
    at = prompt.rfind(markers.opening)
    if at < 0:
        return prompt
    rest = prompt[at + len(markers.opening) :]
    if markers.generation:
        # the generation prompt may grow with template kwargs (an empty think block): it starts alike
        gen = rest.rfind(markers.generation)
        if gen >= 0:
            rest = rest[:gen]
    if markers.closing:
        end = rest.rfind(markers.closing)
        if end >= 0:
            rest = rest[:end]
    return rest


class EchoWorkload(Workload):
    name = "echo"

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tok = tokenizer
        self.vocab_size = tokenizer.vocab_size
        self._markers = user_turn_markers(tokenizer)

    def output_ids(self, prompt_ids: Sequence[int]) -> list[int]:
        prompt = self._tok.decode(list(prompt_ids), skip_special_tokens=False)
        return self._tok.encode(echo_text(prompt, self._markers))

    def tokens(self, prompt_ids: Sequence[int], seed: int) -> Iterator[int]:
        ids = self.output_ids(prompt_ids)
        while True:  # again only past END, i.e. when the request ignores EOS
            yield from ids
            yield END

    def sample_prompt(self, index: int, length: int = 8) -> list[int]:
        return self._tok.encode(f"echo {index}")[:length]
