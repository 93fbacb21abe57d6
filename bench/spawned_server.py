"""A `detok serve` started for a benchmark, and the load plot (split out of bench/load.py)."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.load_summary import PointResult

_BANNER_URL = re.compile(r"OpenAI API : (http://\S+/v1)")


def plot(results: Sequence[PointResult], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = [r.concurrency for r in results]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 7), sharex=True)
    top.plot(c, [r.output_tokens_per_s for r in results], "o-", label="output tokens/s")
    top.set_ylabel("output tokens/s")
    top.set_yscale("log")  # linear scaling shows as a straight line on log-log axes
    right = top.twinx()
    right.plot(c, [r.requests_per_s for r in results], "s--", color="tab:orange", label="requests/s")
    right.set_ylabel("requests/s")
    right.set_yscale("log")
    top.set_title("detok serve: throughput and latency against concurrency")
    top.legend(loc="upper left")
    right.legend(loc="lower right")
    for name, style in (("ttft_p50_ms", "o-"), ("ttft_p99_ms", "o:"), ("itl_p50_ms", "s-"), ("itl_p99_ms", "s:")):
        bottom.plot(c, [getattr(r, name) for r in results], style, label=name.replace("_ms", " (ms)"))
    bottom.set_yscale("log")
    bottom.set_ylabel("latency (ms)")
    bottom.set_xscale("log", base=2)
    bottom.set_xlabel("concurrent streaming clients")
    bottom.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


class SpawnedServer:
    """`detok serve --port 0 ...` in its own process group, stopped with SIGINT like Ctrl-C."""

    def __init__(self, serve_args: Sequence[str], timeout_s: float = 180.0, env: dict[str, str] | None = None,
                 cwd: str | None = None) -> None:
        # (`-m` puts the working directory first on sys.path: a source tree to run is its cwd)
        cmd = [sys.executable, "-m", "detok.cli", "serve", "--port", "0", *serve_args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True, env=env, cwd=cwd)
        found: queue.Queue[str] = queue.Queue()
        # a reader thread keeps the pipe drained for the whole run and hands over the URL
        threading.Thread(target=self._read, args=(found,), daemon=True).start()
        try:
            self.url = found.get(timeout=timeout_s)
        except queue.Empty:
            self.close()
            raise RuntimeError(f"detok serve did not start in {timeout_s:g} s") from None
        if not self.url:
            self.close()
            raise RuntimeError(f"detok serve exited with code {self.proc.returncode} before serving")

    def _read(self, found: queue.Queue[str]) -> None:
        assert self.proc.stdout is not None
        reported = False
        for line in self.proc.stdout:
            match = _BANNER_URL.search(line)
            if match and not reported:
                found.put(match.group(1))
                reported = True
        if not reported:
            self.proc.wait()
            found.put("")

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
