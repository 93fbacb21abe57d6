"""The package as a user installs it: `python -m build` makes the sdist and, from that sdist, the
wheel; the wheel holds every compiled extension of setup.py and the package data; installed into a
new venv and run from a folder outside the clone, `detok serve --demo` streams and stops cleanly on
Ctrl-C, and the public API decodes through the compiled paths.

Offline (no index, no build isolation: the build backend comes from the test extras). The new
venv gets detok from the wheel alone, and its dependencies from this venv's site-packages through
a `.pth` line: a path listed in a `.pth` file is appended to sys.path, but the `.pth` files inside
it are not run, so this venv's editable-install hook (which maps `detok` to the clone) stays inert;
the smoke test checks that detok and each extension are imported from the new venv. A venv made
with --system-site-packages from this interpreter would not do: the base interpreter's site
has none of the dependencies, and this venv's would bring the editable hook with them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from scheduler_stub.workload import embedded_corpus_text
from tests.helpers.serve_helpers import LiveServer
from tests.native.entry_points import NATIVE, ROOT, setup_extensions

pytestmark = pytest.mark.timeout(900)

DATA_FILES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "detok" / "_data").glob("*/*"))

# run by the new venv's interpreter, in a folder outside the clone; argv[1]: the table's modules
SMOKE = r'''
import importlib, json, sys
from pathlib import Path
import numpy as np
import detok
from detok.stream.table import StreamTable
from detok.tokenizer.default import default_tokenizer_dir
from detok.wire.packing import pack_u32, split_text

prefix = Path(sys.prefix).resolve()
assert Path(detok.__file__).resolve().is_relative_to(prefix), detok.__file__
for name in json.loads(sys.argv[1]):
    module = importlib.import_module(name)
    assert Path(module.__file__).resolve().is_relative_to(prefix) and module.__file__.endswith(".so"), module.__file__

tok = detok.load_tokenizer(str(default_tokenizer_dir()))
text = "Hello 北京欢迎你 🫨👍🏽 สวัสดี नमस्ते"
ids = tok.encode(text)
stream = detok.DecodeStream(tok, context_ids=[], params=detok.DecodeParams())
assert type(stream).__mro__[1].__module__ == "detok._native._streamcore", type(stream).__mro__
assert "".join(stream.step(i).text for i in ids) + stream.finish("length").text == text

table = StreamTable(tok, capacity=4)
assert table.compiled
table.open(7, [], detok.DecodeParams())
rows = []
for k, i in enumerate(ids):  # one id per row and step: the compiled plain path
    step = table.step_packed(np.array([7], dtype="<u8").tobytes(), pack_u32([k]), b"", pack_u32([i]))
    rows += split_text(step.text, step.lengths)
assert "".join(rows) == tok.decode(ids), rows
print("smoke ok", len(ids), "ids")
'''


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
                   check=True, capture_output=True, text=True, env={**os.environ, "PIP_NO_INDEX": "1"})
    return out


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv holding the wheel; its dependencies: this venv's site-packages (see the docstring)."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    [wheel] = dist.glob("*.whl")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index", "--no-deps",
                    str(wheel)], check=True)
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "_this_venvs_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def outside_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def test_the_sdist_holds_the_sources_and_headers(dist: Path) -> None:
    [sdist] = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    sources = {s for srcs in setup_extensions().values() for s in srcs}
    headers = {str(p.relative_to(ROOT)) for p in (ROOT / "detok").rglob("*.h")}
    assert sources | headers | set(DATA_FILES) | {"setup.py", "pyproject.toml"} <= names


def test_the_wheel_holds_every_extension_and_the_data(dist: Path) -> None:
    [wheel] = dist.glob("*.whl")
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert f"-{tag}-{tag}-" in wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    extensions = sorted(n for n in names if n.endswith(".so"))
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    assert extensions == sorted(m.replace(".", "/") + suffix for m in NATIVE)
    assert sorted(n for n in names if n.startswith("detok/_data/")) == DATA_FILES
    assert not [n for n in names if n.startswith("tests/")]


def test_the_installed_public_api_runs_on_the_compiled_paths(installed: Path, tmp_path: Path) -> None:
    done = subprocess.run([installed / "bin" / "python", "-c", SMOKE, json.dumps(list(NATIVE))], cwd=tmp_path,
                          capture_output=True, text=True, env=outside_env(), timeout=300)
    assert done.returncode == 0 and "smoke ok" in done.stdout, done.stdout + done.stderr


def test_the_installed_serve_demo_streams_multilingual_text_then_ctrl_c_stops_everything(installed: Path,
                                                                                         tmp_path: Path) -> None:
    """What `make run` shows, from the wheel: the demo's streamed text is the embedded corpus's
    (CJK or emoji through), the banner names the API and metrics, the workers and the stub run as
    children, /health is ok, and Ctrl-C to the group ends every process with exit 0."""
    # 2 ms steps: the demo's answer streams without the default 20 ms pacing per token (the same text)
    server = LiveServer(command=[str(installed / "bin" / "detok"), "serve", "--port", "0", "--demo", "--workers", "1",
                                 "--no-spare", "--step-ms", "2"],
                        cwd=tmp_path)
    try:
        out = server.output
        assert ">>> assistant (streamed):" in out, out
        demo = out.split(">>> assistant (streamed):\n", 1)[1].split("\n<<< ", 1)[0]
        assert demo.strip() and all(p in embedded_corpus_text() for p in demo.split("\n\n"))
        assert any(ord(c) > 0x2E80 for c in demo)
        assert "<<< finish_reason=stop" in out
        assert f"OpenAI API : {server.base_url}/v1" in out and f"metrics    : {server.base_url}/metrics" in out
        assert server.children(), "the workers and the stub run as children"
        assert server.get("/health").json()["status"] == "ok"
        assert server.stop(signal.SIGINT, whole_group=True) == 0, server.output
        assert not server.leftovers(), server.output
    finally:
        server.kill_group()
