"""Conformance kit: prove that an assignor keeps the SPI contract, and measure how well it does.

Three ways in, all running the same checks:

* ``python -m assignors.conformance NAME|module:Class`` (or ``kip848 assignors check ...``)
  prints a report; the exit status is 0 only if every check holds.
* the pytest fixture ``assignor_conformance`` (auto-registered by this package's pytest plugin):
  ``assignor_conformance(MyAssignor())`` fails the test with the report if a check fails.
* :func:`run_conformance` returns a :class:`ConformanceReport` to inspect.

How it works: hypothesis generates small groups (1-8 members, 1-5 topics of 1-16 partitions;
homogeneous or not; no, random or stale current assignments; static members and racks). For
each group the assignor runs five times: once to check the result (every member present,
only existing partitions, each at most once, only to subscribers, all of them assigned, accepted
by :func:`assignors.validation.check_assignment`, inputs untouched), twice more to check
determinism (same input; an equal input built in another order), and once each after a member
leaves and after one joins, to measure stickiness. Fixed cases cover the empty group and an
unknown topic, and the same seeded groups are run under three ``PYTHONHASHSEED`` values to prove
the result never depends on ``hash()`` order. A failing group is then reduced (members,
topics and partitions dropped, current assignments cleared, while the same check still fails),
and the report shows that smallest failing group.

Rack-aware assignors (a class attribute ``rack_aware = True``) are also checked on the groups
with partition racks, against the same group without them: member sizes no less balanced, at
least as many partitions in their member's rack, and — with every member moved to a rack that
holds no replica — exactly the result without partition racks. Their stickiness is measured on
the groups without partition racks (with racks, locality comes before stickiness).

Balance and stickiness are *figures* by default (an assignor such as ``range`` is neither
balanced nor sticky by design); ``require_balance`` / ``require_stickiness`` (``--require-balance``,
``--require-stickiness``) turn them into checks: homogeneous groups within one partition and no
partition that could move to a subscriber two lighter; survivors keep everything when a member
leaves a homogeneous group, and when one joins only what the newcomer receives moves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from assignors.conformance._checks import Figures

__all__ = ["CheckResult", "ConformanceReport", "Figures", "run_conformance"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    name: str
    passed: bool
    summary: str = ""
    example: str = ""
    """The (smallest found) failing group, described, when the check failed."""


@dataclass(slots=True, kw_only=True)
class ConformanceReport:
    assignor: str
    examples: int
    seed: int
    checks: list[CheckResult] = field(default_factory=list)
    figures: Figures = field(default_factory=Figures)
    rack_aware: bool = False
    """The assignor declares ``rack_aware = True`` (the rack checks ran)."""

    @property
    def ok(self) -> bool:
        return all(c.passed for c in self.checks)

    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.passed]

    def render(self) -> str:
        from assignors.conformance._report import render

        return render(self)


def run_conformance(
    assignor: object,
    *,
    examples: int = 200,
    seed: int = 0,
    require_balance: bool = False,
    require_stickiness: bool = False,
    hash_seeds: bool = True,
) -> ConformanceReport:
    """Run every check on ``assignor`` (an instance, a class, a built-in or installed name, or
    ``module:Class``). ``examples`` bounds the number of generated groups; ``seed`` fixes them."""
    from assignors.conformance._runner import run

    return run(
        assignor,
        examples=examples,
        seed=seed,
        require_balance=require_balance,
        require_stickiness=require_stickiness,
        hash_seeds=hash_seeds,
    )
