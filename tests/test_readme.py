"""The README and the docs run as written: their Python examples are executed (the embedding
example as is, over CURVE tcp and with the packaged Qwen2 tokenizer, the changes the README
documents, in subprocesses that must exit 0 within seconds; the decode example line by line
against the values its comments give; the OpenAI client against a live `detok serve`), the CLI
table of docs/operations.md is checked against each command's --help, both ways, and every
command they show has the options it uses."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = {path.name: path.read_text(encoding="utf-8") for path in sorted((ROOT / "docs").glob("*.md"))}
PAGES = {"README.md": README, **DOCS}  # the README first: an example it shows is taken from it
PYTHON_BLOCKS = [block for text in PAGES.values() for block in re.findall(r"```python\n(.*?)```", text, re.S)]

pytestmark = pytest.mark.timeout(240)


def _block(*needles: str) -> str:
    return next(b for b in PYTHON_BLOCKS if all(n in b for n in needles))


def _run_script(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "example.py"
    script.write_text(source, encoding="utf-8")
    # the timeout is a hang detector (the tcp example once stayed in zmq.Context.term forever)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90, cwd=tmp_path)


def _check_embedding_output(out: subprocess.CompletedProcess[str], text: str = " this is a test 北京 欢迎 你 ") -> None:
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and "ContextTerminated" not in out.stderr, out.stderr
    lines = out.stdout.splitlines()
    texts = [ast.literal_eval(re.split(r" (?:None|Finish\()", line)[0]) for line in lines if "scheduler" not in line]
    assert "".join(texts) == text
    assert lines[-1].endswith("Finish(reason='stop', matched='stop token', message=None)")


def test_embedding_example_runs_and_stops_on_the_stop_string(tmp_path: Path) -> None:
    _check_embedding_output(_run_script(tmp_path, _block("DetokPool", "__main__")))


def test_the_docs_show_the_readme_s_embedding_example() -> None:
    """docs/embedding.md shows the same script (one copy runs for both)."""
    readme_example = _block("DetokPool", "__main__")
    assert readme_example in README
    assert readme_example in re.findall(r"```python\n(.*?)```", DOCS["embedding.md"], re.S)


def test_embedding_example_with_the_packaged_tokenizer(tmp_path: Path) -> None:
    """The README's tokenizer sentence applied to the example: the same text from Qwen2."""
    source = "str(detok.tokenizer.default.default_tokenizer_dir())"
    assert source in README
    example = _block("DetokPool", "__main__").replace('"mock"', source)
    assert example.count(source) == 2  # the pool's and the script's own tokenizer
    example = example.replace("import detok\n", "import detok\nimport detok.tokenizer.default\n", 1)
    # byte-level BPE: the text is the generated string itself, up to the stop string (the mock's
    # ids decode with a space before each word)
    _check_embedding_output(_run_script(tmp_path, example), text="this is a test 北京 欢迎 你 ")


def test_embedding_example_over_curve_tcp_exits_cleanly(tmp_path: Path) -> None:
    """The README's "Over tcp" sentence applied to the example: the same text, exit 0, no traceback."""
    from detok.wire.security import generate_keys

    keys = tmp_path / "keys"
    generate_keys(keys)
    example = _block("DetokPool", "__main__")
    pool_call, receiver_call = 'detok.DetokPool("mock", workers=2)', "detok.DeltaReceiver()"
    assert pool_call in example and receiver_call in example
    # exactly the calls the README's paragraph gives, with DIR filled in
    assert 'detok.DetokPool("mock", workers=2, transport="tcp", keys=DIR)' in README
    assert 'detok.DeltaReceiver("tcp://127.0.0.1:*", keys=DIR)' in README
    tcp = example.replace(pool_call, f'detok.DetokPool("mock", workers=2, transport="tcp", keys={str(keys)!r})')
    tcp = tcp.replace(receiver_call, f'detok.DeltaReceiver("tcp://127.0.0.1:*", keys={str(keys)!r})')
    _check_embedding_output(_run_script(tmp_path, tcp))


def test_decode_api_example_gives_the_values_its_comments_show(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each line `EXPR   # VALUE` of the example becomes `assert (EXPR) == VALUE`; the block runs whole."""
    import detok

    monkeypatch.chdir(ROOT)  # its tokenizer path is relative to the clone
    lines, checked = [], 0
    for line in _block("DecodeStream(", "stream.step").splitlines():
        code, sep, comment = line.partition("   # ")
        if sep and comment.strip().startswith("Delta("):
            line = f"assert ({code.strip()}) == {comment.strip()}, {code.strip()!r}"
            checked += 1
        lines.append(line)
    assert checked == 2
    exec("\n".join(lines), {"Delta": detok.Delta, "Finish": detok.Finish})  # noqa: S102 - the README's own code


def test_openai_client_example_against_a_live_server(tmp_path: Path) -> None:
    from tests.helpers.serve_helpers import LiveServer

    live = LiveServer("--workers", "1", "--no-spare", "--step-ms", "2")
    try:
        example = _block("from openai import OpenAI")
        assert 'base_url="http://127.0.0.1:8000/v1"' in example
        source = example.replace("http://127.0.0.1:8000/v1", live.base_url + "/v1")  # the port this test got
        out = _run_script(tmp_path, source)
        assert out.returncode == 0, out.stderr
        assert len(out.stdout) > 20
    finally:
        live.stop()
        live.kill_group()


def test_streamed_tool_call_example_against_a_live_server(tmp_path: Path) -> None:
    """docs/reasoning-and-tools.md's streamed example against the server its page starts, printing
    exactly the output the page shows."""
    from tests.helpers.serve_helpers import LiveServer

    page = DOCS["reasoning-and-tools.md"]
    serve = "detok serve --reasoning-parser qwen3 --tool-call-parser hermes --workload echo"
    assert serve in page
    example = _block("from openai import OpenAI", "tool_calls")
    after = page.split(example, 1)[1].split("```", 1)[1]  # past the example's closing fence
    shown = _fenced_blocks(after)[0][1]  # the output block the page shows next
    live = LiveServer(*serve.split()[2:], "--workers", "1", "--no-spare", "--step-ms", "2")
    try:
        out = _run_script(tmp_path, example.replace("http://127.0.0.1:8000/v1", live.base_url + "/v1"))
        assert out.returncode == 0, out.stderr
        assert out.stdout == shown
    finally:
        live.stop()
        live.kill_group()


def test_every_python_example_of_the_readme_and_docs_is_one_the_tests_run() -> None:
    run = {_block("DetokPool", "__main__"), _block("DecodeStream(", "stream.step"), _block("from openai import OpenAI"),
           _block("from openai import OpenAI", "tool_calls")}
    assert set(PYTHON_BLOCKS) == run


# ---- the CLI table ------------------------------------------------------------------------------


def _cli_rows() -> dict[str, str]:
    """First cell of each CLI table row that starts with `detok <command>` -> the whole row."""
    section = DOCS["operations.md"].split("## CLI", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        m = re.match(r"\| `detok (\w+)", line)
        if m:
            rows[m.group(1)] = rows.get(m.group(1), "") + line
    return rows


@pytest.mark.parametrize("command", ["serve", "frontend", "pool", "worker", "keygen"])
def test_cli_table_names_every_option_and_only_real_ones(command: str) -> None:
    row = _cli_rows()[command]
    out = subprocess.run([sys.executable, "-m", "detok.cli", command, "--help"], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    usage = out.stdout.split("\n\n", 1)[0]
    real = set(re.findall(r"--[a-z][a-z0-9-]+", usage)) - {"--help"}
    named = set(re.findall(r"--[a-z][a-z0-9-]+", row))
    assert real - named == set(), f"options of `detok {command}` missing from the CLI table of docs/operations.md"
    assert named - real == set(), f"options in the CLI table of docs/operations.md that `detok {command}` does not have"
    assert "(default: None)" not in out.stdout and "(default: False)" not in out.stdout
    import argparse

    from detok.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    bare = [a.option_strings for a in sub._actions if a.option_strings and not a.help and a.dest != "help"]
    assert bare == [], f"options of `detok {command}` without help: {bare}"


def test_missing_keys_is_the_same_error_from_pool_and_worker(tmp_path: Path) -> None:
    codes = {}
    for argv in (["pool", "--tokenizer", "mock", "--transport", "tcp"],
                 ["worker", "--tokenizer", "mock", "--bind", "tcp://127.0.0.1:0"]):
        out = subprocess.run([sys.executable, "-m", "detok.cli", *argv], capture_output=True, text=True, timeout=60,
                             cwd=tmp_path)
        assert "need CURVE keys" in out.stderr
        codes[argv[0]] = out.returncode
    assert codes == {"pool": 2, "worker": 2}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_readme_and_docs_refer_to_nothing_outside_the_repository(page: str) -> None:
    shared_dir = "../" + "shared"  # the design folder beside a checkout (split: this file never reads it)
    for outside in ("DESIGN", "TEAM.md", "seed 003", "issue 1", "issue 2", shared_dir):
        assert outside not in PAGES[page], outside


# ---- every command the README shows -------------------------------------------------------------


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced code block, fences paired in order (a closing fence is
    never read as the next block's opening)."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)


def _commands() -> list[str]:
    """Every command the README and the docs show: inline `python ...` spans and command lines of
    code blocks."""
    found = []
    for text in PAGES.values():
        found += re.findall(r"`((?:python|detok) [^`]+)`", text)
    for block in (body for text in PAGES.values() for lang, body in _fenced_blocks(text) if lang in ("", "sh")):
        joined = block.replace("\\\n", " ")
        found += [line.split("  #")[0].strip() for line in joined.splitlines() if re.match(r"(python|detok) ", line)]
    return [c for c in found if "..." not in c]


def _program(command: str) -> list[str] | None:
    words = command.split()
    if words[0] == "detok":
        return [sys.executable, "-m", "detok.cli", words[1]]
    if words[1] == "-m":
        return [sys.executable, "-m", words[2], *([words[3]] if words[2] in ("scheduler_stub", "reference_engine") else [])]
    if words[1].startswith("bench/"):
        return [sys.executable, words[1]]
    return None


def test_every_option_of_every_command_in_the_readme_and_docs_exists() -> None:
    """The flags of each command of the README and the docs are ones its program's --help lists
    (commands shown with long runs are checked this way rather than run); a program shown without
    flags or subcommand exists."""
    helps: dict[tuple[str, ...], str] = {}
    commands = _commands()
    assert len(commands) > 20
    for command in commands:
        program = _program(command)
        if program is None:
            continue
        key = tuple(program)
        flags = {f.split("=")[0] for f in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*(?:=\S*)?", command)}
        flags -= {f.split("=")[0] for f in re.findall(r"--serve-arg=(--[a-z0-9-]+)", command)}  # passed on to serve
        if not flags and key not in helps and len(program) == (3 if program[1] == "-m" else 2):
            # a whole program without flags (no subcommand): nothing to look up, it need only exist
            assert importlib.util.find_spec(program[2]) if program[1] == "-m" else (ROOT / program[1]).is_file(), command
            continue
        if key not in helps:
            out = subprocess.run([*program, "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT)
            assert out.returncode == 0, (command, out.stderr[-2000:])
            helps[key] = out.stdout
        missing = {f for f in flags if f not in helps[key]}
        assert not missing, f"`{command}`: {sorted(missing)} not in `{' '.join(program[1:])} --help`"
