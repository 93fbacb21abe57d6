"""The docs site builds strictly, and what it states about the tree holds.

`mkdocs build --strict` with the validation of mkdocs.yml: a link to a missing page or anchor, a
page left out of the nav or an absolute link is a warning, and strict mode fails on it. The tests
build the real site, then copies of it with one defect each, which must fail. The folder map of
docs/architecture.md is compared with detok's sub-packages, and the limits table of
docs/reliability.md with the constants in the code (tests/helpers/limits_table.py)."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import limits_table

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
_all_limits = functools.cache(limits_table.all_limits)  # parses every module: once for the tests that read it

pytestmark = pytest.mark.timeout(240)


def _build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    # NO_MKDOCS_2_WARNING: mkdocs-material's banner about MkDocs 2.0, not a build warning
    env = {"NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent)}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          capture_output=True, text=True, timeout=180, cwd=root, env=env)


def _copy_site(tmp_path: Path) -> Path:
    root = tmp_path / "clone"
    root.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", root / "mkdocs.yml")
    shutil.copytree(DOCS, root / "docs")
    return root


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    out = _build(ROOT, tmp_path / "site")
    assert out.returncode == 0, out.stdout + out.stderr
    for page in ("index", "architecture", "embedding", "reliability", "benchmarks"):
        assert (tmp_path / "site" / ("" if page == "index" else page) / "index.html").is_file(), page


@pytest.mark.parametrize(
    ("defect", "named"),
    [
        ("link", "no-such-page.md"),
        ("anchor", "#no-such-section"),
        ("unlisted page", "orphan.md"),
    ],
)
def test_a_defect_in_the_docs_fails_the_build(tmp_path: Path, defect: str, named: str) -> None:
    root = _copy_site(tmp_path)
    page = root / "docs" / "architecture.md"
    if defect == "link":
        page.write_text(page.read_text(encoding="utf-8") + "\nSee [a page](no-such-page.md).\n", encoding="utf-8")
    elif defect == "anchor":
        page.write_text(page.read_text(encoding="utf-8") + "\nSee [a section](reliability.md#no-such-section).\n",
                        encoding="utf-8")
    else:
        (root / "docs" / "orphan.md").write_text("# Not in the nav\n", encoding="utf-8")
    out = _build(root, tmp_path / "site")
    assert out.returncode != 0, f"a {defect} did not fail the strict build"
    assert named in out.stdout + out.stderr


def _folder_map() -> set[str]:
    page = (DOCS / "architecture.md").read_text(encoding="utf-8")
    section = page.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `detok/(\w+)/` \|", section, re.M))


def _sub_packages() -> set[str]:
    return {p.parent.name for p in (ROOT / "detok").glob("*/__init__.py")}


def test_the_folder_map_lists_every_sub_package_and_only_those() -> None:
    assert _folder_map() == _sub_packages()


def test_the_folder_map_is_read_from_the_page() -> None:
    """The map's reader finds the rows the page has (so the comparison above compares something)."""
    assert {"tokenizer", "stream", "wire", "worker", "pool", "scheduler", "receiver", "parsing"} <= _folder_map()


def test_the_limits_table_is_the_code_s() -> None:
    page = (DOCS / "reliability.md").read_text(encoding="utf-8")
    table = page.split(limits_table.BEGIN, 1)[1].split(limits_table.END, 1)[0].strip()
    assert table == limits_table.render(_all_limits()), (
        "docs/reliability.md's limits table differs from the code: run python -m tests.helpers.limits_table --write"
    )


def test_the_limits_reader_finds_known_limits_with_their_values(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "MAX_THINGS = 8 * 1024  # things\nSTALL_TIMEOUT_S: float = 10.0\nCHUNK_CHARS = 16_384\n"
        "_MAX_PRIVATE = 1\nNOT_A_BOUND = 3\nGGUF_MAGIC_BYTES = b'GGUF'\n\ndef f():\n    MAX_LOCAL = 2\n",
        encoding="utf-8",
    )
    found = {(limit.name, limit.value) for limit in limits_table.module_limits(source, module="mod")}
    assert found == {("MAX_THINGS", "8 * 1024"), ("STALL_TIMEOUT_S", "10.0"), ("CHUNK_CHARS", "16_384")}
    names = {limit.name for limit in _all_limits()}
    assert {"MAX_BODY_BYTES", "STALL_TIMEOUT_S", "MAX_TOOL_CALLS", "MAX_KV_CACHE_BYTES", "MAX_RID"} <= names

