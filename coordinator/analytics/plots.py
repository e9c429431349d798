"""The report's plots: matplotlib figures rendered as inline SVG (text kept as text), from the
bounded aggregates of :mod:`.report_data`."""

from __future__ import annotations

import io
from typing import Any

from .common import ALL_CAUSES, CLASSIC, CONSUMER, COOPERATIVE, EAGER, MIXED, UNKNOWN_CAUSE

COLORS = {
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
    "assignment_not_stored": "#dbdb8d",
    UNKNOWN_CAUSE: "#c7c7c7",
}
TYPE_COLORS = {CONSUMER: "#1f77b4", MIXED: "#9467bd", CLASSIC: "#ff7f0e"}
PROTOCOL_COLORS = {CONSUMER: "#1f77b4", COOPERATIVE: "#2ca02c", EAGER: "#d62728"}
SCENARIO_COLORS = {"actual": "#7f7f7f", "kip848": "#1f77b4", "cooperative": "#2ca02c"}


def svg(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and doctype: inline SVG


def _style() -> Any:
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
    return plt


def fig(height: float = 3.2, rows: int = 1, cols: int = 1, **kw: Any) -> tuple[Any, Any]:
    plt = _style()
    return plt.subplots(rows, cols, figsize=(9.5, height), **kw)


def nodata(ax: Any) -> None:
    ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="#888")


def cause_series(series: list[dict[str, Any]], bucket_s: int, per: str) -> str:
    """Rebalances per time bucket stacked by cause: one filled step outline per cause (a few
    paths, where a bar per bucket and cause made the SVG large and slow to draw)."""
    from datetime import timedelta

    f, ax = fig()
    if not series:
        nodata(ax)
    else:
        buckets = sorted({r["bucket"] for r in series})
        index = {b: i for i, b in enumerate(buckets)}
        # Each bucket's counts hold from its start to the next one's (the last one's end too).
        xs = [*buckets, buckets[-1] + timedelta(seconds=bucket_s)]
        layers, labels, colors = [], [], []
        for cause in (*ALL_CAUSES, UNKNOWN_CAUSE):
            counts = [0] * len(buckets)
            for r in series:
                if r["cause"] == cause:
                    counts[index[r["bucket"]]] += r["count"]
            if any(counts):
                layers.append([*counts, counts[-1]])
                labels.append(cause)
                colors.append(COLORS[cause])
        ax.stackplot(xs, *layers, labels=labels, colors=colors, step="post", linewidth=0)
        ax.legend(fontsize=7, ncol=2, frameon=False)
        ax.set_ylabel(f"rebalances per {per}")
        f.autofmt_xdate()
    return svg(f)


def converge_hist(hist: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    f, ax = fig(2.8)
    bins: dict[int, int] = {}
    for r in hist:
        bins[r["bin"]] = bins.get(r["bin"], 0) + r["count"]
    if not bins:
        nodata(ax)
    else:
        keys = sorted(bins)
        lefts = [10 ** (b / 8) for b in keys]
        widths = [10 ** ((b + 1) / 8) - 10 ** (b / 8) for b in keys]
        ax.bar(lefts, [bins[b] for b in keys], width=widths, align="edge", color="#1f77b4")
        ax.set_xscale("log")
        ax.set_xlabel("time to converge (ms, log scale)")
        ax.set_ylabel("rebalances")
        for key, style in (("p50_ms", "--"), ("p95_ms", ":")):
            v = summary.get(key)
            if v:
                ax.axvline(v, color="#d62728", linestyle=style, label=f"{key[:-3]} {v:,.0f} ms")
        ax.legend(frameon=False)
    return svg(f)


def scatter(points: list[dict[str, Any]]) -> str:
    f, (a1, a2) = fig(4.6, rows=2, sharex=True)
    if not points:
        nodata(a1)
    else:
        for gt in (CONSUMER, MIXED, CLASSIC):
            pts = [p for p in points if p["group_type"] == gt]
            if pts:
                xs = [p["timestamp"] for p in pts]
                a1.scatter(
                    xs, [p["partitions_moved"] for p in pts], s=9, color=TYPE_COLORS[gt], label=gt
                )
                a2.scatter(
                    xs, [p["unowned_partition_seconds"] for p in pts], s=9, color=TYPE_COLORS[gt]
                )
        a1.set_ylabel("partitions moved")
        a2.set_ylabel("unowned partition-s")
        a1.legend(fontsize=7, frameon=False)
        f.autofmt_xdate()
    return svg(f)


def lines_by_type(series: list[dict[str, Any]], x: str, ys: list[str], ylabel: str) -> str:
    """One line per group type and ``ys`` column (solid, dashed, dotted ...)."""
    f, ax = fig(2.8)
    if not series:
        nodata(ax)
    else:
        xs = sorted({r[x] for r in series})
        for gt in (CONSUMER, MIXED, CLASSIC):
            for y, style in zip(ys, ("-", "--", ":", "-."), strict=False):
                total: dict[Any, float] = {}
                for r in series:
                    if r["group_type"] == gt:
                        total[r[x]] = total.get(r[x], 0) + (r[y] or 0)
                if any(total.values()):
                    ax.plot(
                        xs,
                        [total.get(v, 0) for v in xs],
                        style,
                        color=TYPE_COLORS[gt],
                        label=f"{gt}: {y}",
                        linewidth=1.2,
                    )
        ax.set_ylabel(ylabel)
        ax.legend(frameon=False, fontsize=7)
        f.autofmt_xdate()
    return svg(f)


def progress(rows: list[dict[str, Any]]) -> str:
    f, ax = fig(2.8)
    if not rows:
        nodata(ax)
    else:
        for key in sorted({(r["group_id"], r["topic"]) for r in rows}):
            pts = [r for r in rows if (r["group_id"], r["topic"]) == key]
            ax.plot(
                [p["bucket_start"] for p in pts],
                [p["committed_total"] for p in pts],
                label=f"{key[0]} / {key[1]}",
            )
        ax.set_ylabel("committed offsets (sum over partitions)")
        ax.legend(frameon=False, fontsize=7)
        f.autofmt_xdate()
    return svg(f)


def paired_bars(
    groups: list[dict[str, Any]], series: list[tuple[str, str, str]], ylabel: str
) -> str:
    """Bars per group, side by side: ``series`` are (key, label, color)."""
    f, ax = fig(3.0)
    if not groups:
        nodata(ax)
    else:
        n = len(series)
        width = 0.8 / n
        xs = range(len(groups))
        for k, (key, label, color) in enumerate(series):
            ax.bar(
                [i - 0.4 + width * (k + 0.5) for i in xs],
                [g.get(key) or 0 for g in groups],
                width=width,
                label=label,
                color=color,
            )
        ax.set_xticks(
            list(xs), [g["group_id"] for g in groups], rotation=60, ha="right", fontsize=7
        )
        ax.set_ylabel(ylabel)
        ax.legend(frameon=False)
    return svg(f)


def protocol_cost(rows: list[dict[str, Any]]) -> str:
    """Unowned partition-seconds by group type and protocol: in total and per rebalance."""
    f, (a1, a2) = fig(3.0, cols=2)
    if not rows:
        nodata(a1)
    else:
        labels = [f"{r['group_type']}\n{r['protocol']}" for r in rows]
        colors = [PROTOCOL_COLORS.get(r["protocol"], "#7f7f7f") for r in rows]
        a1.bar(labels, [r["unowned_partition_seconds"] or 0 for r in rows], color=colors)
        a1.set_ylabel("unowned partition-s (total)")
        a2.bar(labels, [r["unowned_per_rebalance"] or 0 for r in rows], color=colors)
        a2.set_ylabel("unowned partition-s per rebalance")
        for ax in (a1, a2):
            ax.tick_params(axis="x", labelsize=7)
    f.tight_layout()
    return svg(f)


def classic_phases(points: list[dict[str, Any]]) -> str:
    """Each classic rebalance's join phase against its sync phase, by protocol."""
    f, ax = fig(3.0)
    if not points:
        nodata(ax)
    else:
        for proto in (EAGER, COOPERATIVE):
            pts = [p for p in points if p["protocol"] == proto]
            if pts:
                ax.scatter(
                    [max(p["join_ms"], 1) for p in pts],
                    [max(p["sync_ms"], 1) for p in pts],
                    s=10,
                    color=PROTOCOL_COLORS[proto],
                    label=proto,
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("join phase: PreparingRebalance -> CompletingRebalance (ms, log)")
        ax.set_ylabel("sync phase -> Stable (ms, log)")
        ax.legend(frameon=False)
    return svg(f)


def timelines(rows: list[dict[str, Any]]) -> str:
    groups = sorted({r["group_id"] for r in rows})
    f, axes = fig(1.6 * max(1, len(groups)), rows=max(1, len(groups)), squeeze=False)
    if not rows:
        nodata(axes[0][0])
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
                    color=COLORS[cause],
                    label=cause,
                    zorder=3,
                )
        types = sorted({p["group_type"] for p in pts})
        ax.set_ylabel("epoch / gen.", fontsize=7)
        ax.set_title(f"{gid} ({', '.join(types)})", fontsize=8, loc="left")
    f.autofmt_xdate()
    f.tight_layout()
    return svg(f)
