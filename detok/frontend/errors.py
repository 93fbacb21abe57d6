"""OpenAI's error JSON, and the exception the request path raises to produce it."""

from __future__ import annotations

import msgspec
import pydantic
from fastapi.responses import Response

from detok.frontend.openai_types import ErrorBody, ErrorResponse

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
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.type = type
        self.code = code

    def body(self) -> ErrorResponse:
        return ErrorResponse(ErrorBody(self.message, self.type, self.param, self.code))


def error_json(error: RequestError) -> bytes:
    return _ENCODER.encode(error.body())


def error_response(error: RequestError) -> Response:
    return Response(error_json(error), status_code=error.status, media_type="application/json")


_UNION_MEMBER_PREFIXES = ("str", "list[", "int", "float", "bool", "dict[")


def _is_union_member(part: str) -> bool:
    return part.startswith(_UNION_MEMBER_PREFIXES) or part[:1].isupper()


def _split_loc(loc: tuple[int | str, ...]) -> tuple[str, list[str]]:
    """JSON path of an error, and the union members pydantic tried on the way (named in `loc`)."""
    path, members = [], []
    for part in map(str, loc):
        (members if _is_union_member(part) else path).append(part)
    return ".".join(path), members


def from_validation_error(error: pydantic.ValidationError) -> RequestError:
    """The first problem pydantic found, named by its JSON path as OpenAI's `param`."""
    errors = error.errors(include_url=False)
    first = errors[0]
    path, members = _split_loc(first["loc"])
    if first["type"] == "json_invalid":
        return RequestError(f"request body is not valid JSON: {first['msg']}", None)
    if first["type"] == "model_type" and not path:
        return RequestError("request body must be a JSON object", None)
    if members:
        # a value no member of a union accepts: say which forms are allowed, not one member's error
        tried = []
        for e in errors:
            p, m = _split_loc(e["loc"])
            if p.startswith(path) and m and m[0] not in tried:
                tried.append(m[0])
        return RequestError(f"{path}: invalid value, expected one of: {', '.join(tried)}", path)
    message = f"{path}: {first['msg']}" if path else first["msg"]
    return RequestError(message, path or None)
