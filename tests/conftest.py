"""Suite-wide switches.

`make test` runs a bounded sample: hypothesis example counts are small and tests marked `slow`
(long soak and fuzz runs) are skipped. `DETOK_SLOW=1` runs them all, with many more examples.
"""

from __future__ import annotations

import os

import pytest

SLOW = os.environ.get("DETOK_SLOW") == "1"
if SLOW:
    os.environ.setdefault("DETOK_EXAMPLES", "300")  # read by the property-test modules at import


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if SLOW:
        return
    skip = pytest.mark.skip(reason="long soak / fuzz run: set DETOK_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
