"""`truncate_prompt_tokens` and `truncation_side` (vLLM's extra request fields): the prompt cut to
its last (`"left"`, the default for generation) or first (`"right"`) k ids before it is served.

As vLLM (`vllm/renderers/params.py`, `TokenizeParams`): -1 means the whole input room
(`max_model_len` minus the request's `max_tokens`, 0 when it sends none); a k past that room is a
400; 0 leaves an empty prompt (a 400 here, as any empty prompt). A text prompt is encoded as
`transformers` encodes it with `truncation=True, max_length=k` (what vLLM asks of it): the special
tokens the tokenizer adds around the text (a BOS, a [CLS] ... [SEP]) are kept and count towards k,
and the text's own ids are cut to the rest; then the ids are cut to k once more (vLLM's
`_token_truncation`, which also cuts a list of ids sent as the prompt). With truncation the whole
prompt text is tokenized, as in vLLM: its cost is bounded by the body limit, and it is paid in the
intake threads (`detok.api.intake`), not on the event loop.
"""

from __future__ import annotations

from typing import Literal

from detok.api.errors import RequestError
from detok.tokenizer.base import Tokenizer

Side = Literal["left", "right"]
PARAM = "truncate_prompt_tokens"


def truncation_size(value: int | None, max_model_len: int, max_output: int, max_output_param: str) -> int | None:
    """The number of prompt ids to keep, or None for no truncation; RequestError past the room."""
    if value is None or max_output >= max_model_len:
        # (a request whose max_tokens leaves no input room gets the context-length 400 naming it)
        return None
    room = max_model_len - max_output
    if value == -1:
        return room
    if value > room:
        # vLLM's TokenizeParams message (its max_total_tokens_param is "max_model_len")
        raise RequestError(
            f"{PARAM}={value} cannot be greater than max_model_len - {max_output_param} = {room}. "
            "Please request a smaller truncation size.",
            PARAM,
        )
    return value


def cut_ids(ids: list[int], keep: int, side: Side) -> list[int]:
    """The last (`"left"`) or first (`"right"`) `keep` of `ids`."""
    if len(ids) <= keep:
        return ids
    return ids[len(ids) - keep:] if side == "left" else ids[:keep]


def encode_truncated(tok: Tokenizer, text: str, add_special_tokens: bool, keep: int, side: Side) -> list[int]:
    """`text`'s ids cut to `keep` as `transformers`' truncating encode cuts them (module docstring)."""
    ids = tok.encode_prompt(text, add_special_tokens=add_special_tokens)
    if len(ids) <= keep or not add_special_tokens:
        return cut_ids(ids, keep, side)
    content = tok.encode_prompt(text, add_special_tokens=False)
    added = len(ids) - len(content)
    if keep < added:  # (the library does not cut the text then: only the ids are cut, below)
        return cut_ids(ids, keep, side)
    # the added tokens' place: before and after the text's own ids (Llama's BOS, BERT's [CLS]/[SEP])
    for before in range(added + 1) if added > 0 else ():
        if ids[before:before + len(content)] == content:
            kept = cut_ids(content, max(keep - added, 0), side)
            ids = ids[:before] + kept + ids[before + len(content):]
            break
    return cut_ids(ids, keep, side)
