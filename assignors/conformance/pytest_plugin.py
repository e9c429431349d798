"""pytest plugin: the ``assignor_conformance`` fixture.

Registered through the ``pytest11`` entry point of this package, so it is available in any
project that has kip848-coordinator installed (or add ``pytest_plugins =
["assignors.conformance.pytest_plugin"]`` to a conftest.py). Importing it is free of side
effects; the kit itself is imported on first use.

Usage::

    def test_my_assignor_conforms(assignor_conformance):
        report = assignor_conformance(MyAssignor(), require_balance=True)
        assert report.figures.leave_lost_by_survivors == 0

The fixture calls :func:`assignors.conformance.run_conformance` with the same keyword arguments
(``examples``, ``seed``, ``require_balance``, ``require_stickiness``, ``hash_seeds``), prints the
report (shown with ``pytest -s`` or ``-rP``) and fails the test with it if any check fails.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture
def assignor_conformance() -> Callable[..., Any]:
    """Run the conformance kit on an assignor; fail the test with the report if a check fails."""

    def check(assignor: object, **options: Any) -> Any:
        from assignors.conformance import run_conformance

        report = run_conformance(assignor, **options)
        text = report.render()
        print(text)
        if not report.ok:
            pytest.fail(text, pytrace=False)
        return report

    return check
