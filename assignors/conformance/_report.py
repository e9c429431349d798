"""The human-readable conformance report."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from assignors.conformance import ConformanceReport


def render(report: ConformanceReport) -> str:
    f = report.figures
    lines = [
        f"Conformance report for {report.assignor}",
        (
            f"{report.examples} generated groups (hypothesis, seed {report.seed}): "
            f"{f.homogeneous} homogeneous, {f.heterogeneous} heterogeneous"
        ),
        (
            "rack-aware (rack_aware = True): rack checks on the groups with partition racks; "
            "stickiness measured without them"
            if report.rack_aware
            else "not rack-aware (no rack_aware = True): no rack checks"
        ),
        "",
    ]
    width = max(len(c.name) for c in report.checks) if report.checks else 10
    lines.append(f"{'CHECK':<{width}}  RESULT  DETAIL")
    for c in report.checks:
        lines.append(
            f"{c.name:<{width}}  {'pass' if c.passed else 'FAIL':<6}  {c.summary}".rstrip()
        )

    def ratio(n: int, d: int) -> str:
        return f"{n} of {d}" if d else "n/a"

    rows = [
        (
            "balance, homogeneous: largest max-min member size",
            f"{f.homogeneous_max_spread}" if f.homogeneous else "n/a",
        ),
        (
            "balance, homogeneous: groups with max-min > 1",
            ratio(f.homogeneous_unbalanced, f.homogeneous),
        ),
        (
            "balance, heterogeneous: largest max-min member size",
            f"{f.heterogeneous_max_spread}" if f.heterogeneous else "n/a",
        ),
        (
            "balance, heterogeneous: groups where one move narrows the gap",
            ratio(f.locally_improvable, f.heterogeneous),
        ),
        (
            "balance, heterogeneous: groups where a chain of moves narrows it",
            ratio(f.chain_improvable, f.heterogeneous),
        ),
        (
            "stickiness, one leaves: partitions survivors lost (homogeneous)",
            f"{f.leave_lost_homogeneous} over {f.leaves_homogeneous} groups",
        ),
        (
            "stickiness, one leaves: partitions survivors lost (all)",
            f"{f.leave_lost_by_survivors} over {f.leaves} groups",
        ),
        (
            "stickiness, one leaves: partitions moved / minimum",
            f"{f.leave_moved} / {f.leave_minimum}",
        ),
        (
            "stickiness, one joins: moved between old members (homogeneous)",
            f"{f.join_moved_between_old_homogeneous} over {f.joins_homogeneous} groups",
        ),
        (
            "stickiness, one joins: moved between old members (all)",
            f"{f.join_moved_between_old} over {f.joins} groups",
        ),
        (
            "stickiness, one joins: partitions moved / minimum (homogeneous)",
            f"{f.join_moved_homogeneous} / {f.join_minimum_homogeneous}",
        ),
    ]
    if report.rack_aware:
        rows.append(
            (
                "racks: partitions in their member's rack, with / without partition racks",
                f"{f.rack_local} / {f.rack_local_blind} over {f.racked} groups",
            )
        )
    lines += ["", "FIGURES"]
    fw = max(len(r[0]) for r in rows)
    lines += [f"  {name:<{fw}}  {value}" for name, value in rows]

    failed = report.failed()
    if failed:
        lines += ["", f"{len(failed)} check(s) FAILED"]
        for c in failed:
            lines += ["", f"FAILED {c.name}: {c.summary}"]
            if c.example:
                lines.append("  smallest failing group found:")
                lines += [f"    {line}" for line in c.example.splitlines()]
    else:
        lines += ["", f"all {len(report.checks)} checks passed"]
    return "\n".join(lines)
