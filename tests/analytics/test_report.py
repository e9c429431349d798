"""``kip848 analytics report``: tables, the what-if, the HTML page in a real browser, errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from coordinator.analytics.report import TABLES, run_report
from coordinator.analytics.spark import AnalyticsError

from .conftest import chromium

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]


def _table(report: Any, name: str) -> list[dict[str, Any]]:
    return pq.read_table(report.tables[name]).to_pylist()


def test_one_parquet_table_per_metric_and_the_page(report: Any, workload: dict[str, Any]) -> None:
    assert sorted(report.tables) == sorted(TABLES)
    for name in TABLES:
        assert (report.out_dir / "tables" / name).is_dir()
    rebalances = _table(report, "rebalances")
    summary = {r["group_id"]: r for r in _table(report, "group_summary")}
    # The summary agrees with the detail tables it is made of.
    for gid, s in summary.items():
        mine = [r for r in rebalances if r["group_id"] == gid]
        assert s["rebalances"] == len(mine)
        assert s["partitions_moved"] == sum(r["partitions_moved"] for r in mine)
    overall = [
        r
        for r in _table(report, "convergence")
        if r["group_id"] is None and r["group_type"] is None
    ]
    assert len(overall) == 1 and overall[0]["rebalances"] == len(rebalances)
    done = sorted(
        r["time_to_converge_ms"] for r in rebalances if r["time_to_converge_ms"] is not None
    )
    assert overall[0]["max_ms"] == done[-1]
    assert overall[0]["p50_ms"] == pytest.approx(_percentile(done, 0.5))
    assert overall[0]["p95_ms"] == pytest.approx(_percentile(done, 0.95))
    page = report.html.read_text()
    import re

    assert "<script" not in page  # no script: nothing that could fail or fetch at run time
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert page.count("<svg") >= 8


def _percentile(values: list[int], q: float) -> float:
    pos = (len(values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def test_whatif_with_the_assignor_used_reproduces_history(report: Any) -> None:
    rows = _table(report, "whatif")
    rebalances = _table(report, "rebalances")
    migrated = {r["group_id"] for r in rebalances if r["cause"] == "migrated_from_classic"}
    plain = [r for r in rows if r["group_id"] not in migrated]
    assert len(plain) > 30 and all(r["assignor"] == "uniform" and r["error"] is None for r in rows)
    for r in plain:
        assert (r["whatif_moved"], r["whatif_newly_assigned"], r["whatif_spread"]) == (
            r["actual_moved"],
            r["actual_newly_assigned"],
            r["actual_spread"],
        ), r
    # The same "moved" as the rebalances table (one computation per bump).
    by_epoch = {(r["group_id"], r["group_epoch"]): r["partitions_moved"] for r in rebalances}
    for r in plain:
        assert by_epoch[(r["group_id"], r["assignment_epoch"])] == r["actual_moved"]


def test_whatif_with_another_assignor(spark: Any, workload: dict[str, Any], tmp_path: Path) -> None:
    result = run_report(workload["parquet"], tmp_path, spark=spark, whatif_assignor="range")
    rows = pq.read_table(result.tables["whatif"]).to_pylist()
    assert rows and all(r["assignor"] == "range" and r["error"] is None for r in rows)
    assert any(
        (r["whatif_moved"], r["whatif_spread"]) != (r["actual_moved"], r["actual_spread"])
        for r in rows
    )
    with pytest.raises(AnalyticsError, match="unknown assignor"):
        run_report(workload["parquet"], tmp_path / "x", spark=spark, whatif_assignor="nope")


def test_the_page_renders_in_chromium_without_errors(report: Any, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    requests: list[str] = []
    shot = tmp_path / "report.png"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium(),
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on(
                "console",
                lambda m: errors.append(m.text) if m.type in ("error", "warning") else None,
            )
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(report.html.as_uri(), wait_until="load")
            assert page.title() == "kip848 rebalance report"
            assert page.locator("h2", has_text="Time to converge").is_visible()
            assert page.locator("h2", has_text="The fleet").is_visible()
            assert page.locator("h3", has_text="Groups to migrate first").is_visible()
            assert page.locator("h2", has_text="Migration what-if").is_visible()
            assert page.locator("svg").count() >= 8
            assert page.locator("table").count() >= 4
            page.screenshot(path=str(shot), full_page=True)
            # The group-type filter works without a script: rows of the other types hide, and
            # each per-type block shows the chosen type's variant.
            rows = page.locator("tr[data-gt]")
            types = [rows.nth(i).get_attribute("data-gt") for i in range(rows.count())]
            assert {"consumer", "classic"} <= set(types)
            for f in ("classic", "consumer", "all"):
                page.click(f"label[for=gt-{f}]")
                visible = [rows.nth(i).is_visible() for i in range(rows.count())]
                assert visible == [f == "all" or f in t.split() for t in types], f
                for g in ("all", "consumer", "mixed", "classic"):
                    assert page.locator(f".v-{g}").first.is_visible() is (g == f), (f, g)
                page.screenshot(path=str(tmp_path / f"report-{f}.png"), full_page=True)
        finally:
            browser.close()
    assert errors == []
    assert all(u.startswith(("file://", "data:")) for u in requests), requests
    assert shot.stat().st_size > 50_000
    assert (tmp_path / "report-classic.png").stat().st_size > 50_000


def test_missing_corrupt_and_foreign_inputs_are_clear_errors(tmp_path: Path) -> None:
    kip = [sys.executable, "-m", "coordinator.cli", "analytics", "report"]
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not really parquet")
    foreign = tmp_path / "foreign.parquet"
    import pyarrow as pa

    pq.write_table(pa.table({"x": [1, 2]}), foreign)
    cases = [
        (tmp_path / "missing.parquet", "no journal export at"),
        (bad, "not a readable Parquet file"),
        (foreign, "not a kip848 journal export"),
    ]
    for path, message in cases:
        p = subprocess.run(
            [*kip, "--input", str(path), "--out", str(tmp_path / "out")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert p.returncode == 1, p.stderr
        assert message in p.stderr and "Traceback" not in p.stderr


def test_journal_bounds_come_from_the_parquet_statistics(
    spark: Any, report: Any, workload: dict[str, Any], tmp_path: Path
) -> None:
    """The report's first/last timestamp and row count are read from the footer (no Spark
    job); a file written without statistics makes the report fall back to a Spark job."""
    import pyarrow.compute as pc

    from coordinator.analytics.report import _bounds

    table = pq.read_table(workload["parquet"])
    ts = pc.cast(table["timestamp"], "int64")
    want = (pc.min(ts).as_py(), pc.max(ts).as_py(), table.num_rows)
    assert want[2] > 1000 and want[0] < want[1]
    assert _bounds(workload["parquet"]) == want
    bare = tmp_path / "no-stats.parquet"
    footer = pq.read_metadata(workload["parquet"]).metadata  # the export's key-value metadata
    pq.write_table(table.replace_schema_metadata(footer), bare, write_statistics=False)
    assert _bounds(bare) is None
    fallback = run_report(bare, tmp_path / "fallback", spark=spark)
    for name in TABLES:
        assert sorted(map(repr, _table(fallback, name))) == sorted(
            map(repr, _table(report, name))
        ), name
    empty = tmp_path / "empty.parquet"
    pq.write_table(table.slice(0, 0), empty)
    assert _bounds(empty) == (None, None, 0)


def test_migration_whatif_on_the_workloads_classic_groups(report: Any) -> None:
    """Every classic group of the generated workload replayed through the core as a KIP-848
    group (uniform) and, when eager, as a cooperative one: migrating each eager group would
    have saved unowned partition-seconds, most of them."""
    rows = _table(report, "migration_whatif")
    rebalances = _table(report, "rebalances")
    classic = {r["group_id"]: r["protocol"] for r in rebalances if r["group_type"] == "classic"}
    assert {r["group_id"] for r in rows} == set(classic)
    assert all(r["error"] is None for r in rows)
    kip848 = {r["group_id"]: r for r in rows if r["scenario"] == "kip848"}
    coop = {r["group_id"]: r for r in rows if r["scenario"] == "cooperative"}
    eager = sorted(g for g, p in classic.items() if p == "eager")
    assert set(coop) == set(eager) and len(eager) == 5 and len(kip848) == 9
    for g in eager:
        assert kip848[g]["assignor"] == "uniform"
        assert (
            kip848[g]["whatif_unowned_partition_seconds"]
            <= (kip848[g]["actual_unowned_partition_seconds"])
        ), g
        assert (
            coop[g]["whatif_unowned_partition_seconds"]
            <= (coop[g]["actual_unowned_partition_seconds"])
        ), g
    # The actual side is the rebalances table's own numbers.
    for g, r in kip848.items():
        mine = [b for b in rebalances if b["group_id"] == g and b["group_type"] == "classic"]
        assert r["actual_rebalances"] == len(mine)
        assert r["actual_unowned_partition_seconds"] == pytest.approx(
            sum(b["unowned_partition_ms"] for b in mine) / 1000
        )

    def total(rs: list[dict[str, Any]], key: str) -> float:
        return round(sum(r[key] for r in rs), 3)

    eager_kip = [kip848[g] for g in eager]
    assert total(eager_kip, "actual_unowned_partition_seconds") == 3028.6
    assert total(eager_kip, "whatif_unowned_partition_seconds") == 361.557
    assert total(list(coop.values()), "whatif_unowned_partition_seconds") == 305.495
    # In total (eager and cooperative groups): 3,325.1 actual, 634.6 as KIP-848 groups.
    assert total(list(kip848.values()), "actual_unowned_partition_seconds") == 3325.1
    assert total(list(kip848.values()), "whatif_unowned_partition_seconds") == 634.615
    # (339.799, 3,345.3 and 622.601 while a static member back under a new member id with
    # other owned partitions rebalanced a Stable classic group: the workload's cooperative
    # groups, and the what-if's cooperative replays, rebalance less since, as Kafka's
    # updateStaticMemberThenRebalanceOrCompleteJoin, only a change of the group's protocol
    # does; docs/legacy_bridge.md.)
    # Rebalances that stopped nobody: every eager rebalance but the first one stops everybody.
    assert sum(r["actual_rebalances_stopping_nobody"] for r in eager_kip) == 5
    assert sum(r["whatif_rebalances_stopping_nobody"] for r in eager_kip) == 19


def test_a_version_1_export_is_reported(spark: Any, tmp_path: Path) -> None:
    """The page and every table from an export of schema version 1 (its tables: see
    test_metrics.test_a_version_1_export_gives_the_oracles_tables); its classic groups are
    replayed by the migration what-if too."""
    from .test_metrics import V1_EXPORT

    r = run_report(V1_EXPORT, tmp_path / "v1", spark=spark)
    assert sorted(r.tables) == sorted(TABLES)
    page = r.html.read_text()
    assert "schema v1" in page
    rebalances = _table(r, "rebalances")
    classic = {b["group_id"] for b in rebalances if b["group_type"] == "classic"}
    assert classic and all(g in page for g in {b["group_id"] for b in rebalances})
    replayed = _table(r, "migration_whatif")
    assert {w["group_id"] for w in replayed} == classic
    assert all(w["error"] is None for w in replayed)
