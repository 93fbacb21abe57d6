"""The README's embedding example runs as written (real pool, real sockets)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_embedding_example_runs_and_stops_on_the_stop_string(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    example = next(b for b in blocks if "DetokPool" in b and "__main__" in b)
    script = tmp_path / "embed.py"
    script.write_text(example, encoding="utf-8")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    texts = [ast.literal_eval(re.split(r" (?:None|Finish\()", line)[0]) for line in lines if "scheduler" not in line]
    streamed = "".join(texts)
    assert streamed == " this is a test 北京 欢迎 你 "
    assert lines[-1].endswith("Finish(reason='stop', matched='stop token', message=None)")


def test_decode_api_example_gives_the_documented_deltas() -> None:
    import detok

    tok = detok.load_tokenizer(str(README.parent / "tests" / "fixtures" / "hf" / "qwen2"))
    stream = detok.DecodeStream(tok, context_ids=tok.encode("Say hi:")[-5:], params=detok.DecodeParams(stop=["\n\n"]))
    assert stream.step(tok.encode(" 🫨")) == detok.Delta(" 🫨", None)
    assert stream.finish("length") == detok.Delta("", detok.Finish("length", None, None))
