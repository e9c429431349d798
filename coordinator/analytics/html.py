"""The HTML report: small aggregates of the written tables, plotted with matplotlib (inline SVG)
into one self-contained page (inline CSS, no script, no external resource), rendered with
Jinja2 (autoescaped). :func:`collect` is the only place that brings data to the driver, and
each piece is bounded (at most a few thousand rows) whatever the size of the journal.
"""

from __future__ import annotations

import io
import math
from datetime import UTC, datetime
from typing import Any

from .metrics import ALL_CAUSES, UNKNOWN_CAUSE, Params

MAX_POINTS = 3_000
TOP_GROUPS = 25
TIMELINE_GROUPS = 4

_COLORS = {
    "migrated_from_classic": "#8c564b",
    "member_joined": "#2ca02c",
    "member_fenced_session_timeout": "#d62728",
    "member_fenced_rebalance_timeout": "#9467bd",
    "member_left": "#1f77b4",
    "member_left_or_session_timeout": "#ff7f0e",
    "subscription_changed": "#17becf",
    "assignor_changed": "#bcbd22",
    "regex_resolution_changed": "#e377c2",
    "topic_metadata_changed": "#7f7f7f",
    "member_rejoined": "#aec7e8",
    "static_member_restart": "#98df8a",
    "downgraded_from_consumer_group": "#c49c94",
    UNKNOWN_CAUSE: "#c7c7c7",
}


def _rows(df: Any) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.collect()]


def collect(spark: Any, paths: dict[str, str], params: Params) -> dict[str, Any]:
    """Bounded aggregates of the written tables for the page."""
    from pyspark.sql import functions as F

    t = {name: spark.read.parquet(p) for name, p in paths.items()}
    rb, gs, conv, wi = t["rebalances"], t["group_summary"], t["convergence"], t["whatif"]
    size = params.bucket_s * 1_000_000
    bucket = F.timestamp_micros(
        (
            F.floor((F.unix_micros("timestamp") - F.lit(params.t0_us)) / size) * size
            + F.lit(params.t0_us)
        ).cast("long")
    )
    data: dict[str, Any] = {"bucket_s": params.bucket_s}
    totals = (
        gs.agg(
            *[
                F.sum(c).alias(c)
                for c in gs.columns
                if c
                not in ("group_id", "group_type", "protocol", "max_members", "distinct_members")
            ],
            F.count("*").alias("groups"),
        )
        .collect()[0]
        .asDict()
    )
    overall = conv.filter(F.col("group_id").isNull() & F.col("group_type").isNull()).collect()
    data["summary"] = {**totals, **(overall[0].asDict() if overall else {})}
    data["cause_series"] = _rows(
        rb.groupBy(bucket.alias("bucket"), "cause").count().orderBy("bucket")
    )
    by_cause: dict[str, int] = {}
    for r in data["cause_series"]:  # bounded: buckets x causes
        by_cause[r["cause"]] = by_cause.get(r["cause"], 0) + r["count"]
    data["by_cause"] = [
        {"cause": c, "count": n} for c, n in sorted(by_cause.items(), key=lambda x: (-x[1], x[0]))
    ]
    conv_ms = rb.filter(F.col("time_to_converge_ms").isNotNull())
    data["converge_hist"] = _rows(
        conv_ms.groupBy(
            F.floor(F.log10(F.greatest(F.col("time_to_converge_ms"), F.lit(1))) * 8).alias("bin")
        )
        .count()
        .orderBy("bin")
    )
    data["scatter"] = _rows(
        rb.select("timestamp", "partitions_moved", "unowned_partition_seconds", "cause")
        .orderBy(F.rand(7))
        .limit(MAX_POINTS)
    )
    data["churn"] = _rows(
        t["member_churn"]
        .groupBy("bucket_start")
        .agg(
            F.sum("joins").alias("joins"),
            F.sum("removals").alias("removals"),
            F.sum("fenced_session_timeout").alias("fenced_session_timeout"),
            F.sum("fenced_rebalance_timeout").alias("fenced_rebalance_timeout"),
            F.sum("static_restarts").alias("static_restarts"),
        )
        .orderBy("bucket_start")
    )
    cr = t["commit_rate"]
    data["commits"] = _rows(
        cr.groupBy("bucket_start").agg(F.sum("commits").alias("commits")).orderBy("bucket_start")
    )
    top_progress = (
        cr.groupBy("group_id", "topic")
        .agg(F.max("committed_total").alias("m"))
        .orderBy(F.desc("m"), "group_id", "topic")
        .limit(6)
    )
    data["progress"] = _rows(
        cr.join(top_progress.select("group_id", "topic"), ["group_id", "topic"])
        .select("group_id", "topic", "bucket_start", "committed_total")
        .orderBy("group_id", "topic", "bucket_start")
    )
    data["removals"] = _rows(
        t["member_removals"].groupBy("reason").count().orderBy(F.desc("count"))
    )
    data["whatif_total"] = (
        wi.agg(
            F.count("*").alias("computations"),
            F.sum("actual_moved").alias("actual_moved"),
            F.sum("whatif_moved").alias("whatif_moved"),
            F.avg("actual_spread").alias("actual_spread"),
            F.avg("whatif_spread").alias("whatif_spread"),
            F.sum(F.when(F.col("error").isNotNull(), 1).otherwise(0)).alias("errors"),
            F.first("assignor", ignorenulls=True).alias("assignor"),
        )
        .collect()[0]
        .asDict()
    )
    data["whatif_groups"] = _rows(
        wi.groupBy("group_id")
        .agg(
            F.sum("actual_moved").alias("actual_moved"),
            F.sum("whatif_moved").alias("whatif_moved"),
            F.avg("actual_spread").alias("actual_spread"),
            F.avg("whatif_spread").alias("whatif_spread"),
        )
        .orderBy(F.desc("actual_moved"), "group_id")
        .limit(TOP_GROUPS)
    )
    per_group_conv = conv.filter(F.col("group_id").isNotNull()).select(
        "group_id", "p50_ms", "p95_ms", "max_ms"
    )
    data["top_groups"] = _rows(
        gs.join(per_group_conv, "group_id", "left")
        .orderBy(F.desc("rebalances"), "group_id")
        .limit(TOP_GROUPS)
    )
    top = [r["group_id"] for r in data["top_groups"][:TIMELINE_GROUPS]]
    data["timelines"] = _rows(
        rb.filter(F.col("group_id").isin(top))
        .select("group_id", "timestamp", "group_epoch", "cause")
        .orderBy("group_id", "timestamp")
        .limit(MAX_POINTS)
    )
    data["recent"] = _rows(
        rb.select(
            "group_id",
            "group_epoch",
            "timestamp",
            "cause",
            "members_joined",
            "members_removed",
            "members_after",
            "partitions_moved",
            "unowned_partition_seconds",
            "time_to_converge_ms",
            "outcome",
        )
        .orderBy(F.desc("timestamp"), "group_id")
        .limit(40)
    )
    return data


# ---------------------------------------------------------------------------- plots


def _svg(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and doctype: inline SVG


def _fig(height: float = 3.2) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "font.size": 9,
            "svg.fonttype": "none",
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    )
    return plt.subplots(figsize=(9.5, height))


def _nodata(ax: Any) -> None:
    ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="#888")


def plot_cause_series(series: list[dict[str, Any]], bucket_s: int) -> str:
    fig, ax = _fig()
    if not series:
        _nodata(ax)
    else:
        buckets = sorted({r["bucket"] for r in series})
        index = {b: i for i, b in enumerate(buckets)}
        bottom = [0] * len(buckets)
        width = bucket_s / 86400 * 0.9
        for cause in (*ALL_CAUSES, UNKNOWN_CAUSE):
            counts = [0] * len(buckets)
            for r in series:
                if r["cause"] == cause:
                    counts[index[r["bucket"]]] = r["count"]
            if any(counts):
                ax.bar(
                    buckets, counts, width=width, bottom=bottom, color=_COLORS[cause], label=cause
                )
                bottom = [a + b for a, b in zip(bottom, counts, strict=True)]
        ax.legend(fontsize=7, ncol=2, frameon=False)
        ax.set_ylabel(f"epoch bumps per {_dur(bucket_s)}")
        fig.autofmt_xdate()
    return _svg(fig)


def plot_converge_hist(hist: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    fig, ax = _fig(2.8)
    if not hist:
        _nodata(ax)
    else:
        lefts = [10 ** (r["bin"] / 8) for r in hist]
        widths = [10 ** ((r["bin"] + 1) / 8) - 10 ** (r["bin"] / 8) for r in hist]
        ax.bar(lefts, [r["count"] for r in hist], width=widths, align="edge", color="#1f77b4")
        ax.set_xscale("log")
        ax.set_xlabel("time to converge (ms, log scale)")
        ax.set_ylabel("epoch bumps")
        for key, style in (("p50_ms", "--"), ("p95_ms", ":")):
            v = summary.get(key)
            if v:
                ax.axvline(v, color="#d62728", linestyle=style, label=f"{key[:-3]} {v:,.0f} ms")
        ax.legend(frameon=False)
    return _svg(fig)


def plot_scatter(points: list[dict[str, Any]]) -> str:
    _fig()  # style and backend
    import matplotlib.pyplot as plt

    plt.close("all")
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9.5, 4.6), sharex=True)
    if not points:
        _nodata(a1)
    else:
        for cause in (*ALL_CAUSES, UNKNOWN_CAUSE):
            pts = [p for p in points if p["cause"] == cause]
            if pts:
                xs = [p["timestamp"] for p in pts]
                a1.scatter(
                    xs, [p["partitions_moved"] for p in pts], s=9, color=_COLORS[cause], label=cause
                )
                a2.scatter(
                    xs, [p["unowned_partition_seconds"] for p in pts], s=9, color=_COLORS[cause]
                )
        a1.set_ylabel("partitions moved")
        a2.set_ylabel("unowned partition-s")
        a1.legend(fontsize=7, ncol=2, frameon=False)
        fig.autofmt_xdate()
    return _svg(fig)


def plot_lines(series: list[dict[str, Any]], x: str, ys: list[str], ylabel: str) -> str:
    fig, ax = _fig(2.8)
    if not series:
        _nodata(ax)
    else:
        xs = [r[x] for r in series]
        for y in ys:
            ax.plot(xs, [r[y] for r in series], label=y, linewidth=1.2)
        ax.set_ylabel(ylabel)
        ax.legend(frameon=False, fontsize=7)
        fig.autofmt_xdate()
    return _svg(fig)


def plot_progress(rows: list[dict[str, Any]]) -> str:
    fig, ax = _fig(2.8)
    if not rows:
        _nodata(ax)
    else:
        keys = sorted({(r["group_id"], r["topic"]) for r in rows})
        for key in keys:
            pts = [r for r in rows if (r["group_id"], r["topic"]) == key]
            ax.plot(
                [p["bucket_start"] for p in pts],
                [p["committed_total"] for p in pts],
                label=f"{key[0]} / {key[1]}",
            )
        ax.set_ylabel("committed offsets (sum over partitions)")
        ax.legend(frameon=False, fontsize=7)
        fig.autofmt_xdate()
    return _svg(fig)


def plot_whatif(groups: list[dict[str, Any]], assignor: str) -> str:
    fig, ax = _fig(3.0)
    if not groups:
        _nodata(ax)
    else:
        xs = range(len(groups))
        ax.bar(
            [i - 0.2 for i in xs],
            [g["actual_moved"] for g in groups],
            width=0.4,
            label="actual",
            color="#1f77b4",
        )
        ax.bar(
            [i + 0.2 for i in xs],
            [g["whatif_moved"] for g in groups],
            width=0.4,
            label=f"what-if: {assignor}",
            color="#ff7f0e",
        )
        ax.set_xticks(
            list(xs), [g["group_id"] for g in groups], rotation=60, ha="right", fontsize=7
        )
        ax.set_ylabel("partitions moved (all rebalances)")
        ax.legend(frameon=False)
    return _svg(fig)


def plot_timelines(rows: list[dict[str, Any]]) -> str:
    groups = sorted({r["group_id"] for r in rows})
    _fig()
    import matplotlib.pyplot as plt

    plt.close("all")
    fig, axes = plt.subplots(
        max(1, len(groups)), 1, figsize=(9.5, 1.6 * max(1, len(groups))), squeeze=False
    )
    if not rows:
        _nodata(axes[0][0])
    for ax, gid in zip([a[0] for a in axes], groups, strict=False):
        pts = [r for r in rows if r["group_id"] == gid]
        ax.step(
            [p["timestamp"] for p in pts],
            [p["group_epoch"] for p in pts],
            where="post",
            color="#bbb",
            linewidth=0.8,
        )
        for cause in (*ALL_CAUSES, UNKNOWN_CAUSE):
            cp = [p for p in pts if p["cause"] == cause]
            if cp:
                ax.scatter(
                    [p["timestamp"] for p in cp],
                    [p["group_epoch"] for p in cp],
                    s=12,
                    color=_COLORS[cause],
                    label=cause,
                    zorder=3,
                )
        ax.set_ylabel("epoch", fontsize=7)
        ax.set_title(gid, fontsize=8, loc="left")
    fig.autofmt_xdate()
    fig.tight_layout()
    return _svg(fig)


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    s = float(seconds)
    if s < 60:
        return f"{s:g} s"
    if s < 3600:
        return f"{s / 60:g} min"
    if s < 86400:
        return f"{s / 3600:g} h"
    return f"{s / 86400:g} d"


def _ms(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    v = float(v)
    return f"{v:,.0f} ms" if v < 10_000 else f"{v / 1000:,.1f} s"


def _num(v: Any, digits: int = 0) -> str:
    if v is None:
        return "–"
    return f"{float(v):,.{digits}f}"


def _ts(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, (int, float)):
        v = datetime.fromtimestamp(v / 1000, UTC)
    return v.strftime("%Y-%m-%d %H:%M:%S")


TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kip848 rebalance report</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,"DejaVu Sans",sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#243447;color:#fff;padding:18px 28px}
header h1{margin:0 0 4px;font-size:22px} header p{margin:0;color:#cdd6e0;font-size:12.5px}
main{max-width:1100px;margin:0 auto;padding:10px 28px 40px}
section{background:#fff;border:1px solid #e3e3e3;border-radius:6px;padding:14px 18px;margin:16px 0}
h2{font-size:17px;margin:0 0 8px} .note{color:#666;font-size:12.5px;margin:4px 0 8px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:10px}
.card{background:#f3f6f9;border-radius:5px;padding:8px 10px}
.card b{display:block;font-size:19px} .card span{font-size:12px;color:#555}
table{border-collapse:collapse;width:100%;font-size:12.5px}
th,td{border-bottom:1px solid #eee;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f3f6f9} td.n{text-align:right;font-variant-numeric:tabular-nums}
.warn{background:#fff4e5;border-color:#f0c36d}
svg{max-width:100%;height:auto}
code{background:#f1f1f1;padding:0 3px;border-radius:3px}
</style></head><body>
<header><h1>Consumer group rebalances</h1>
<p>{{ input_path }} · {{ rows | num }} journal records · {{ first }} – {{ last }} UTC ·
schema v{{ info.schema_version }} · {{ "complete journal" if info.complete else "partial journal" }}
· generated {{ generated }}</p></header>
<main>
{% if info.warnings %}<section class="warn"><h2>Warnings</h2>
<ul>{% for w in info.warnings %}<li>{{ w }}</li>{% endfor %}</ul></section>{% endif %}
<section><h2>Overview</h2><div class="cards">
<div class="card"><b>{{ s.groups | num }}</b><span>groups</span></div>
<div class="card"><b>{{ s.rebalances | num }}</b><span>epoch bumps (rebalances)</span></div>
<div class="card"><b>{{ s.p50_ms | ms }}</b><span>time to converge, p50</span></div>
<div class="card"><b>{{ s.p95_ms | ms }}</b><span>time to converge, p95</span></div>
<div class="card"><b>{{ s.max_ms | ms }}</b><span>time to converge, max</span></div>
<div class="card"><b>{{ s.partitions_moved | num }}</b><span>partitions moved</span></div>
<div class="card"><b>{{ s.unowned_partition_seconds | num(1) }}</b><span>unowned partition-seconds</span></div>
<div class="card"><b>{{ s.joins | num }}</b><span>members joined</span></div>
<div class="card"><b>{{ s.member_fenced_session_timeout | num }}</b><span>fenced: session timeout</span></div>
<div class="card"><b>{{ s.member_fenced_rebalance_timeout | num }}</b><span>fenced: rebalance timeout</span></div>
<div class="card"><b>{{ s.member_left | num }}</b><span>left</span></div>
<div class="card"><b>{{ s.member_left_or_session_timeout | num }}</b><span>left or session timeout</span></div>
<div class="card"><b>{{ s.static_restarts | num }}</b><span>static member restarts</span></div>
<div class="card"><b>{{ s.commits | num }}</b><span>offset commits</span></div>
</div>
<p class="note">Convergence: {{ s.converged | num }} converged, {{ s.superseded | num }} superseded by a
later bump before converging, {{ s.in_progress | num }} still in progress at the end of the data,
{{ s.group_deleted | num }} ended by the group's deletion or conversion.</p></section>

<section><h2>Rebalances over time, by cause</h2>
<p class="note">Each bar: the group epoch bumps of all groups in a {{ bucket }} interval, coloured by
what caused them.</p>{{ plots.causes }}
<table><tr><th>cause</th><th class="n">bumps</th></tr>
{% for r in data.by_cause %}<tr><td>{{ r.cause }}</td><td class="n">{{ r.count | num }}</td></tr>{% endfor %}
</table></section>

<section><h2>Time to converge</h2>
<p class="note">From each epoch bump until every member of the group had reconciled to the
group's epoch (or the group had no member left).</p>{{ plots.converge }}</section>

<section><h2>Partitions moved and unowned partition-seconds per rebalance</h2>
<p class="note">Moved: partitions whose target owner changed from one live member to another.
Unowned: from the moment a partition's owner released it until a member owned it again.
{% if data.scatter | length >= max_points %}A random sample of {{ max_points }} rebalances.{% endif %}</p>
{{ plots.scatter }}</section>

<section><h2>Group timelines</h2><p class="note">The {{ timelines }} groups with the most rebalances: the group epoch over time, each bump
coloured by cause.</p>{{ plots.timelines }}</section>

<section><h2>Member churn</h2>{{ plots.churn }}
<table><tr><th>why members were removed</th><th class="n">members</th></tr>
{% for r in data.removals %}<tr><td>{{ r.reason }}</td><td class="n">{{ r.count | num }}</td></tr>{% endfor %}
</table></section>

<section><h2>Offset commits</h2>{{ plots.commits }}
<p class="note">Committed-offset progress of the six group/topic pairs with the highest committed
offsets (the sum over the topic's partitions of the last committed offset).</p>
{{ plots.progress }}</section>

<section><h2>Assignor what-if: {{ w.assignor or assignor }}</h2>
<p class="note">Every target assignment computed in the journal ({{ w.computations | num }}) was
recomputed with <code>{{ assignor }}</code>, fed the same members and subscriptions and its own
previous targets. Partitions moved: {{ w.actual_moved | num }} actual, {{ w.whatif_moved | num }}
with {{ assignor }}. Average spread (most minus least loaded member): {{ w.actual_spread | num(2) }}
actual, {{ w.whatif_spread | num(2) }} with {{ assignor }}.{% if w.errors %} The assignor failed
{{ w.errors }} times.{% endif %}</p>{{ plots.whatif }}</section>

<section><h2>Groups with the most rebalances</h2><table>
<tr><th>group</th><th class="n">bumps</th><th class="n">joins</th><th class="n">left</th>
<th class="n">fenced (session)</th><th class="n">fenced (rebalance)</th><th class="n">left or session</th>
<th class="n">static restarts</th><th class="n">moved</th><th class="n">unowned p-s</th>
<th class="n">converge p50</th><th class="n">p95</th><th class="n">max</th><th class="n">commits</th></tr>
{% for g in data.top_groups %}<tr><td>{{ g.group_id }}</td><td class="n">{{ g.rebalances | num }}</td>
<td class="n">{{ g.joins | num }}</td><td class="n">{{ g.member_left | num }}</td>
<td class="n">{{ g.member_fenced_session_timeout | num }}</td><td class="n">{{ g.member_fenced_rebalance_timeout | num }}</td>
<td class="n">{{ g.member_left_or_session_timeout | num }}</td><td class="n">{{ g.static_restarts | num }}</td>
<td class="n">{{ g.partitions_moved | num }}</td><td class="n">{{ g.unowned_partition_seconds | num(1) }}</td>
<td class="n">{{ g.p50_ms | ms }}</td><td class="n">{{ g.p95_ms | ms }}</td><td class="n">{{ g.max_ms | ms }}</td>
<td class="n">{{ g.commits | num }}</td></tr>{% endfor %}</table></section>

<section><h2>Latest rebalances</h2><table>
<tr><th>time</th><th>group</th><th class="n">epoch</th><th>cause</th><th>members</th><th class="n">after</th>
<th class="n">moved</th><th class="n">unowned p-s</th><th class="n">converged in</th><th>outcome</th></tr>
{% for r in data.recent %}<tr><td>{{ r.timestamp | ts }}</td><td>{{ r.group_id }}</td><td class="n">{{ r.group_epoch }}</td>
<td>{{ r.cause }}</td><td>{% for m in r.members_joined %}+{{ m }} {% endfor %}{% for m in r.members_removed %}−{{ m.member_id }} ({{ m.reason }}) {% endfor %}</td>
<td class="n">{{ r.members_after }}</td><td class="n">{{ r.partitions_moved | num }}</td>
<td class="n">{{ r.unowned_partition_seconds | num(1) }}</td><td class="n">{{ r.time_to_converge_ms | ms }}</td><td>{{ r.outcome }}</td></tr>{% endfor %}
</table></section>

<section><h2>Tables</h2><p class="note">Every metric is also a Parquet table under
<code>tables/</code> beside this page: {% for t in tables %}<code>{{ t }}</code>{{ ", " if not loop.last }}{% endfor %}
(docs/analytics.md defines each column).</p></section>
</main></body></html>
"""


def render(data: dict[str, Any], *, info: Any, input_path: str, assignor: str, rows: int) -> str:
    import jinja2
    from markupsafe import Markup

    from .report import TABLES

    env = jinja2.Environment(autoescape=True, undefined=jinja2.ChainableUndefined)
    env.filters.update(num=_num, ms=_ms, ts=_ts)
    s = data["summary"]
    plots = {
        "causes": plot_cause_series(data["cause_series"], data["bucket_s"]),
        "converge": plot_converge_hist(data["converge_hist"], s),
        "scatter": plot_scatter(data["scatter"]),
        "timelines": plot_timelines(data["timelines"]),
        "churn": plot_lines(
            data["churn"],
            "bucket_start",
            [
                "joins",
                "removals",
                "fenced_session_timeout",
                "fenced_rebalance_timeout",
                "static_restarts",
            ],
            f"members per {_dur(data['bucket_s'])}",
        ),
        "commits": plot_lines(
            data["commits"], "bucket_start", ["commits"], f"commits per {_dur(data['bucket_s'])}"
        ),
        "progress": plot_progress(data["progress"]),
        "whatif": plot_whatif(data["whatif_groups"], assignor),
    }
    times = [r["bucket"] for r in data["cause_series"]] + [
        r["bucket_start"] for r in data["commits"]
    ]
    safe = {k: Markup(v) for k, v in plots.items()}  # our own SVG, not user text
    return env.from_string(TEMPLATE).render(
        data=data,
        s=s,
        w=data["whatif_total"],
        plots=safe,
        info=info,
        input_path=input_path,
        rows=rows,
        assignor=assignor,
        bucket=_dur(data["bucket_s"]),
        first=_ts(min(times)) if times else "–",
        last=_ts(max(times)) if times else "–",
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        tables=TABLES,
        max_points=MAX_POINTS,
        timelines=TIMELINE_GROUPS,
    )
