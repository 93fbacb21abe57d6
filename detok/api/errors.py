"""OpenAI's error JSON, and the exception the request path raises to produce it.

A pydantic error's `loc` mixes JSON path parts (field names, list indexes, dict keys) with the
names of the union members pydantic tried (`str`, `list[str]`, a model's class name). They are
told apart by walking the request model's own field types along the `loc`, never by guessing from
how a part is spelled (a field named `stream` is not the union member `str`).
"""

from __future__ import annotations

import types
import typing
from typing import Any

import msgspec
import pydantic
from fastapi.responses import Response

from detok.api.openai_requests import REQUEST_MODELS
from detok.api.openai_types import ErrorBody, ErrorResponse

_ENCODER = msgspec.json.Encoder()


class RequestError(Exception):
    """A request the server refuses: becomes `{"error": {...}}` with `status`."""

    def __init__(
        self,
        message: str,
        param: str | None = None,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.type = type
        self.code = code
        self.headers = headers

    def body(self) -> ErrorResponse:
        return ErrorResponse(ErrorBody(self.message, self.type, self.param, self.code))


def error_json(error: RequestError) -> bytes:
    return _ENCODER.encode(error.body())


def error_response(error: RequestError) -> Response:
    return Response(error_json(error), status_code=error.status, media_type="application/json",
                    headers=error.headers)


# ---- pydantic errors -------------------------------------------------------------------------------


def _walk(tp: Any, parts: list[Any], path: list[str], members: list[str]) -> bool:
    """Split `parts` (the rest of a loc, at a value of type `tp`) into `path` and `members`;
    False if they do not fit the type (the caller then tries another union member)."""
    if not parts:
        return True
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(options) == 1:  # X | None: pydantic names no member
            return _walk(options[0], parts, path, members)
        for option in options:
            p, m = list(path), [*members, str(parts[0])]
            if _walk(option, parts[1:], p, m):
                path[:], members[:] = p, m
                return True
        return False
    head, rest = parts[0], parts[1:]
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        field = tp.model_fields.get(str(head))
        path.append(str(head))
        if field is None:  # an extra key of an open object (its value is Any)
            return tp.model_config.get("extra") == "allow"
        return _walk(field.annotation, rest, path, members)
    if origin in (list, tuple) and isinstance(head, int):
        path.append(str(head))
        return _walk(typing.get_args(tp)[0], rest, path, members)
    if origin is dict:
        path.append(str(head))
        if rest and rest[0] == "[key]":  # the key itself was invalid
            return len(rest) == 1
        return _walk(typing.get_args(tp)[1], rest, path, members)
    return False  # a leaf type with parts left over


def split_loc(model: type[pydantic.BaseModel] | None, loc: tuple[int | str, ...]) -> tuple[str, list[str]]:
    """JSON path of an error, and the union members pydantic tried on the way (named in `loc`)."""
    path: list[str] = []
    members: list[str] = []
    if model is None or not _walk(model, list(loc), path, members):
        return ".".join(map(str, loc)), []
    return ".".join(path), members


def _friendly(member: str) -> str:
    """A union member as a client reads it: `list[str]` -> "an array"."""
    if member.startswith("literal["):
        return member[len("literal[") : -1]
    for prefix, name in (("list[", "an array"), ("dict[", "an object"), ("str", "a string"),
                         ("int", "an integer"), ("float", "a number"), ("bool", "a boolean")):
        if member.startswith(prefix):
            return name
    return "an object"  # a model's class name


def from_validation_error(
    error: pydantic.ValidationError, model: type[pydantic.BaseModel] | None = None
) -> RequestError:
    """The first problem pydantic found, named by its JSON path as OpenAI's `param`."""
    model = model or REQUEST_MODELS.get(error.title)
    errors = error.errors(include_url=False)
    first = errors[0]
    path, members = split_loc(model, first["loc"])
    if first["type"] == "json_invalid":
        return RequestError(f"request body is not valid JSON: {first['msg']}", None)
    if first["type"] == "model_type" and not path:
        return RequestError("request body must be a JSON object", None)
    if members:
        # a value no member of a union accepts: say which forms are allowed, not one member's error
        tried: list[str] = []
        for e in errors:
            p, m = split_loc(model, e["loc"])
            if (p == path or p.startswith(path + ".")) and m and _friendly(m[0]) not in tried:
                tried.append(_friendly(m[0]))
        return RequestError(f"{path}: invalid value, expected {' or '.join(tried)}", path)
    message = f"{path}: {first['msg']}" if path else first["msg"]
    return RequestError(message, path or None)
