"""The table of compiled modules (tests/native/entry_points.py) is setup.py's list, and every entry
point it names exists in this build: the sanitizer run and the fuzz target cannot miss a module."""

from __future__ import annotations

import pytest

from tests.native.entry_points import NATIVE, ROOT, entry_point, setup_extensions


def test_the_table_names_setup_pys_extensions() -> None:
    assert sorted(NATIVE) == sorted(setup_extensions())


def test_every_c_file_is_built_by_one_extension() -> None:
    built = [src for sources in setup_extensions().values() for src in sources]
    assert len(built) == len(set(built))
    assert sorted(built) == sorted(str(p.relative_to(ROOT)) for p in (ROOT / "detok").rglob("*.c"))


@pytest.mark.parametrize("name", [f"{m}:{e}" for m, entries in NATIVE.items() for e in entries])
def test_every_entry_point_is_built(name: str) -> None:
    assert callable(entry_point(name))
