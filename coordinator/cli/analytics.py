"""``kip848 analytics``: the record journal as Parquet, rebalance analytics on Spark, and a
workload generator (docs/analytics.md).

* ``export --data-dir DIR | --store URI --out PATH [--since T] [--until T]``: offline, read-only
  (safe while servers run on the store); ``--store postgresql://...`` reads the PostgreSQL store
  several nodes share.
* ``report --input PATH --out DIR [--master URL] [--what-if ASSIGNOR] [--conf K=V]``: Spark
  jobs (``local[*]`` by default), one Parquet table per metric, ``DIR/report.html``.
* ``generate --data-dir DIR [--seed N] [--groups N] [--duration S] ...``: a realistic store
  written by the real runtime on virtual time.

Exit codes: 0 ok, 1 failure (missing/corrupt input, Spark failed), 2 usage error.
"""

from __future__ import annotations

import argparse
import sys

from coordinator.cli.config import DEFAULT_DATA_DIR, add_config_flags, build_config
from coordinator.cli.dump_replay import add_store_flag, check_store_uri
from coordinator.cli.errors import UsageError
from coordinator.cli.registry import Commands


def register(commands: Commands) -> None:
    p = commands.add(
        "analytics",
        cmd_analytics,
        help="the journal as Parquet, rebalance analytics on Spark, a workload generator",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    sub = p.add_subparsers(dest="analytics_command", metavar="ACTION", required=True)

    e = sub.add_parser("export", help="write a store's journal as Parquet (offline, read-only)")
    e.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR")
    add_store_flag(e)
    e.add_argument("--out", required=True, metavar="PATH", help="the Parquet file to write")
    e.add_argument("--since", metavar="T", help="first time (epoch ms or ISO 8601, UTC)")
    e.add_argument("--until", metavar="T", help="end time, exclusive (epoch ms or ISO 8601)")
    e.add_argument(
        "--progress",
        choices=("auto", "always", "never"),
        default="auto",
        help="progress bar on stderr (auto: when stderr is a terminal)",
    )
    add_config_flags(e)

    r = sub.add_parser("report", help="rebalance analytics on Spark: Parquet tables + HTML")
    r.add_argument("--input", required=True, metavar="PATH", help="a file written by export")
    r.add_argument("--out", required=True, metavar="DIR")
    r.add_argument(
        "--master", default="local[*]", metavar="URL", help="Spark master (default local[*])"
    )
    r.add_argument(
        "--what-if",
        dest="what_if",
        metavar="ASSIGNOR",
        help="replay history through this assignor (default: the export's default assignor)",
    )
    r.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting"
    )

    g = sub.add_parser("generate", help="write a realistic store (the real runtime, virtual time)")
    g.add_argument("--data-dir", required=True, metavar="DIR", help="must not hold a store yet")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--groups", type=int, default=20)
    g.add_argument("--duration", type=int, default=1800, metavar="SECONDS", help="virtual time")
    g.add_argument("--topics", type=int, default=8)
    g.add_argument("--shards", type=int, default=4)
    g.add_argument("--classic-fraction", type=float, default=0.3, metavar="F")
    g.add_argument("--cooperative-fraction", type=float, default=0.4, metavar="F")
    g.add_argument("--upgrade-fraction", type=float, default=0.4, metavar="F")
    g.add_argument("--static-fraction", type=float, default=0.3, metavar="F")
    g.add_argument("--events-per-group-hour", type=float, default=6.0, metavar="N")


def cmd_analytics(args: argparse.Namespace) -> int:
    return {"export": _export, "report": _report, "generate": _generate}[args.analytics_command](
        args
    )


def _err(message: str) -> int:
    print(f"kip848 analytics: {message}", file=sys.stderr)
    return 1


def _export(args: argparse.Namespace) -> int:
    from coordinator.analytics.export import ExportError, export_journal, parse_time

    config = build_config(args.config_file, args.set)
    check_store_uri(args)
    try:
        since = None if args.since is None else parse_time(args.since)
        until = None if args.until is None else parse_time(args.until)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    progress = args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())
    try:
        result = export_journal(
            args.data_dir,
            args.out,
            store_uri=args.store,
            since_ms=since,
            until_ms=until,
            session_timeout_ms=config.consumer_session_timeout_ms,
            assignors=tuple(config.consumer_assignors),
            progress=progress,
            warn=lambda w: print(f"kip848 analytics: warning: {w}", file=sys.stderr),
        )
    except ExportError as exc:
        return _err(str(exc))
    info = result.info
    span = (
        "" if info.first_offset is None else f" (offsets {info.first_offset}..{info.last_offset})"
    )
    print(f"Exported {info.rows} records{span} to {result.path} in {result.seconds:.1f} s.")
    return 0


def _report(args: argparse.Namespace) -> int:
    from coordinator.analytics.report import run_report
    from coordinator.analytics.spark import AnalyticsError

    conf: dict[str, str] = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--conf expects KEY=VALUE, got {item!r}")
        conf[key.strip()] = value.strip()
    try:
        result = run_report(
            args.input,
            args.out,
            master=args.master,
            whatif_assignor=args.what_if,
            conf=conf,
            log=lambda m: print(m, file=sys.stderr),
        )
    except AnalyticsError as exc:
        return _err(str(exc))
    except Exception as exc:  # noqa: BLE001 - Spark's errors (Py4J, captured SQL errors)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return _err(f"the Spark job failed: {first}")
    total = sum(result.stages.values())
    print(
        f"Report: {result.html} ({len(result.tables)} tables in {result.out_dir / 'tables'}; {total:.1f} s)"
    )
    return 0


def _generate(args: argparse.Namespace) -> int:
    from coordinator.analytics.workload import WorkloadOptions, generate

    if args.groups < 1 or args.duration < 1 or args.topics < 1 or args.shards < 1:
        raise UsageError("--groups, --duration, --topics and --shards must be at least 1")
    fractions = (
        args.classic_fraction,
        args.cooperative_fraction,
        args.upgrade_fraction,
        args.static_fraction,
    )
    if not all(0.0 <= f <= 1.0 for f in fractions):
        raise UsageError("the --*-fraction options must be between 0 and 1")
    opts = WorkloadOptions(
        seed=args.seed,
        groups=args.groups,
        duration_s=args.duration,
        topics=args.topics,
        shards=args.shards,
        classic_fraction=args.classic_fraction,
        cooperative_fraction=args.cooperative_fraction,
        upgrade_fraction=args.upgrade_fraction,
        static_fraction=args.static_fraction,
        events_per_group_hour=args.events_per_group_hour,
    )
    try:
        result = generate(args.data_dir, opts)
    except FileExistsError as exc:
        return _err(str(exc))
    print(
        f"Generated {result.records} records ({result.groups} groups, {result.actions} client "
        f"actions, {result.virtual_seconds} s of virtual time) in {args.data_dir}."
    )
    return 0
