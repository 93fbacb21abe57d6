"""A request body through the frontend's validation, as the HTTP handler runs it: the job it makes,
or the 400 it raises (pydantic's errors worded as the app words them)."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest

from detok.api.errors import RequestError, from_validation_error
from detok.api.openai_requests import ChatCompletionRequest, CompletionRequest
from detok.api.validation import GenerationJob, ServingLimits, chat_job, completion_job
from detok.tokenizer.base import Tokenizer

LIMITS = ServingLimits("m", 64)


def job(tok: Tokenizer, kind: str, lim: ServingLimits = LIMITS, **body: Any) -> GenerationJob:
    model, build = (ChatCompletionRequest, chat_job) if kind == "chat" else (CompletionRequest, completion_job)
    return build(model.model_validate_json(json.dumps({"model": "m", **body})), tok, lim)  # type: ignore[arg-type]


def refused(tok: Tokenizer, kind: str, **body: Any) -> RequestError:
    model = ChatCompletionRequest if kind == "chat" else CompletionRequest
    with pytest.raises((RequestError, pydantic.ValidationError)) as info:
        job(tok, kind, **body)
    error = info.value
    return from_validation_error(error, model) if isinstance(error, pydantic.ValidationError) else error
