"""The table of every named limit on docs/reliability.md, generated from the code.

A named limit is a public module-level constant of `detok/`, `scheduler_stub/` or
`reference_engine/` whose name says it is a bound: a word MAX, MIN, LIMIT or TIMEOUT, or a name
ending in _MAX or in a bounded quantity (_ENTRIES, _CHARS, _BYTES, _DEPTH, _THREADS, _LOOKAHEAD,
_PER_BATCH, _PER_CUT, _HOLD_S, _WAIT_S), less the few such names that are not bounds
(NOT_LIMITS). The table gives the value as the code writes it (the source expression, so
`8 * 1024 * 1024` stays readable); the code is read with `ast`, never imported, so the table does
not depend on which optional extensions are built.

    python -m tests.helpers.limits_table           # print the table
    python -m tests.helpers.limits_table --write   # rewrite it in docs/reliability.md
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reliability.md"
PACKAGES = ("detok", "scheduler_stub", "reference_engine")
BEGIN, END = "<!-- limits:begin -->", "<!-- limits:end -->"
_LIMIT_NAME = re.compile(
    r"(?:^|_)(?:MAX|MIN|LIMIT|TIMEOUT)(?:_|$)|_(?:ENTRIES|CHARS|BYTES|DEPTH|THREADS|LOOKAHEAD|PER_BATCH|PER_CUT|HOLD_S|WAIT_S)$"
)
# names of that form that are not bounds: a file signature, a bitmap's width, a thread count chosen for speed
NOT_LIMITS = frozenset({"GGUF_MAGIC_BYTES", "FIRSTS_BYTES", "BLAS_THREADS"})


class Limit(NamedTuple):
    module: str
    name: str
    value: str


def module_limits(path: Path, module: str | None = None) -> list[Limit]:
    source = path.read_text(encoding="utf-8")
    module = module or ".".join(path.relative_to(ROOT).with_suffix("").parts)
    found = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if not isinstance(target, ast.Name) or target.id.startswith("_") or not target.id.isupper():
            continue
        if target.id in NOT_LIMITS or not (_LIMIT_NAME.search(target.id) or target.id.endswith("_MAX")):
            continue
        expression = ast.get_source_segment(source, value) or ""
        found.append(Limit(module, target.id, " ".join(expression.split())))
    return found


def all_limits() -> list[Limit]:
    limits = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            limits += module_limits(path)
    return sorted(limits, key=lambda limit: (limit.module, limit.name))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # a table cell's bar


def render(limits: list[Limit]) -> str:
    rows = ["| constant | value | module |", "|---|---|---|"]
    rows += [f"| `{limit.name}` | `{_cell(limit.value)}` | `{limit.module}` |" for limit in limits]
    return "\n".join(rows)


def page_with_table(page: str, table: str) -> str:
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Print the table of every named limit, or write it into docs/reliability.md.")
    parser.add_argument("--write", action="store_true", help="rewrite the table in docs/reliability.md")
    table = render(all_limits())
    if parser.parse_args(argv).write:
        PAGE.write_text(page_with_table(PAGE.read_text(encoding="utf-8"), table), encoding="utf-8")
    else:
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
