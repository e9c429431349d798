"""The HTML report: one self-contained page (inline CSS and SVG, no script, nothing fetched),
rendered with Jinja2 (autoescaped) from :mod:`.report_data`'s aggregates and :mod:`.plots`.

It leads with the fleet (groups of each type, what each protocol costs, the groups to migrate
first), then every section for all groups or one group type: a filter made of radio buttons
and CSS (``#gt-classic:checked ~ main ...``) shows the matching variant of each per-type block
and hides the table rows (``data-gt``) of other types — it works with scripts disabled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from . import plots
from .common import CLASSIC, CONSUMER, COOPERATIVE, EAGER, MIXED, Params
from .migration_whatif import KIP848
from .report_data import ALL, FILTERS, MAX_POINTS, TIMELINE_GROUPS, collect, filtered

__all__ = ["Params", "collect", "render"]

TYPE_LABELS = {
    ALL: "all groups",
    CONSUMER: "consumer groups",
    MIXED: "mixed (migrating)",
    CLASSIC: "classic groups",
}


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


def _number(v: Any) -> float | None:
    """A value to show as a number; None for a missing one (null, NaN, undefined)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return None if isinstance(v, float) and math.isnan(v) else float(v)


def _ms(v: Any) -> str:
    x = _number(v)
    if x is None:
        return "–"
    return f"{x:,.0f} ms" if x < 10_000 else f"{x / 1000:,.1f} s"


def _num(v: Any, digits: int = 0) -> str:
    x = _number(v)
    return "–" if x is None else f"{x:,.{digits}f}"


def _pct(part: Any, whole: Any) -> str:
    x, total = _number(part), _number(whole)
    if x is None or not total:
        return "–"
    return f"{100.0 * x / total:.0f}%"


def _ts(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, (int, float)):
        v = datetime.fromtimestamp(v / 1000, UTC)
    return str(v.strftime("%Y-%m-%d %H:%M:%S"))


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
h2{font-size:17px;margin:0 0 8px} h3{font-size:14px;margin:12px 0 6px}
.note{color:#666;font-size:12.5px;margin:4px 0 8px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:10px}
.card{background:#f3f6f9;border-radius:5px;padding:8px 10px}
.card b{display:block;font-size:19px} .card span{font-size:12px;color:#555}
.lead{font-size:15px;margin:6px 0 10px}
table{border-collapse:collapse;width:100%;font-size:12.5px}
th,td{border-bottom:1px solid #eee;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f3f6f9} td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.total td{font-weight:600;border-top:2px solid #ccc}
.warn{background:#fff4e5;border-color:#f0c36d}
svg{max-width:100%;height:auto}
code{background:#f1f1f1;padding:0 3px;border-radius:3px}
.gt{display:inline-block;font-size:11px;border-radius:3px;padding:0 4px;color:#fff}
.gt-consumer{background:#1f77b4}.gt-mixed{background:#9467bd}.gt-classic{background:#ff7f0e}
input.f{position:absolute;opacity:0;pointer-events:none}
nav.filter{margin-top:10px;font-size:13px} nav.filter span{color:#cdd6e0;margin-right:6px}
nav.filter label{display:inline-block;cursor:pointer;border:1px solid #5b7089;border-radius:4px;padding:2px 9px;margin-right:4px;color:#fff}
#gt-all:checked~header label[for=gt-all],#gt-consumer:checked~header label[for=gt-consumer],
#gt-mixed:checked~header label[for=gt-mixed],#gt-classic:checked~header label[for=gt-classic]{background:#fff;color:#243447}
.v-consumer,.v-mixed,.v-classic{display:none}
#gt-consumer:checked~main .v-all,#gt-mixed:checked~main .v-all,#gt-classic:checked~main .v-all{display:none}
#gt-consumer:checked~main .v-consumer,#gt-mixed:checked~main .v-mixed,#gt-classic:checked~main .v-classic{display:block}
#gt-consumer:checked~main tr[data-gt]:not([data-gt~=consumer]),#gt-mixed:checked~main tr[data-gt]:not([data-gt~=mixed]),
#gt-classic:checked~main tr[data-gt]:not([data-gt~=classic]){display:none}
</style></head><body>
{% for f in filters %}<input class="f" type="radio" name="gt" id="gt-{{ f }}"{{ " checked" if f == "all" }}>{% endfor %}
<header><h1>Consumer group rebalances</h1>
<p>{{ input_path }} · {{ rows | num }} journal records · {{ first }} – {{ last }} UTC ·
schema v{{ info.schema_version }} · {{ "complete journal" if info.complete else "partial journal" }}
· generated {{ generated }}</p>
<nav class="filter"><span>show:</span>{% for f in filters %}<label for="gt-{{ f }}">{{ labels[f] }}</label>{% endfor %}</nav></header>
<main>
{% if info.warnings %}<section class="warn"><h2>Warnings</h2>
<ul>{% for w in info.warnings %}<li>{{ w }}</li>{% endfor %}</ul></section>{% endif %}

<section><h2>The fleet</h2>
<div class="cards">
{% for f in ["consumer", "mixed", "classic"] %}<div class="card"><b>{{ fleet_types[f] | num }}</b><span>{{ labels[f] }}</span></div>{% endfor %}
<div class="card"><b>{{ fleet_protocols["eager"] | num }} / {{ fleet_protocols["cooperative"] | num }}</b><span>classic: eager / cooperative</span></div>
<div class="card"><b>{{ migration_counts["upgrade"] | num }} / {{ migration_counts["downgrade"] | num }}</b><span>upgrades / downgrades</span></div>
</div>
{% if costliest %}<p class="lead">The costliest protocol: <b>{{ costliest.protocol }}</b> ({{ costliest.group_type }} groups):
{{ costliest.unowned_partition_seconds | num(1) }} unowned partition-seconds over {{ costliest.rebalances | num }} rebalances,
{{ costliest.unowned_per_rebalance | num(2) }} per rebalance.</p>{% endif %}
{{ plots.protocol_cost }}
<table><tr><th>group type</th><th>protocol</th><th class="n">rebalances</th><th class="n">stopped nobody</th>
<th class="n">partitions moved</th><th class="n">unowned p-s</th><th class="n">per rebalance</th><th class="n">converge p50</th></tr>
{% for r in data.protocol_cost %}<tr data-gt="{{ r.group_type }}"><td><span class="gt gt-{{ r.group_type }}">{{ r.group_type }}</span></td><td>{{ r.protocol }}</td>
<td class="n">{{ r.rebalances | num }}</td><td class="n">{{ r.stopping_nobody | num }}</td><td class="n">{{ r.partitions_moved | num }}</td>
<td class="n">{{ r.unowned_partition_seconds | num(1) }}</td><td class="n">{{ r.unowned_per_rebalance | num(2) }}</td><td class="n">{{ r.p50_ms | ms }}</td></tr>{% endfor %}
</table>
<h3>Groups to migrate first</h3>
<p class="note">Classic groups ranked by the unowned partition-seconds a KIP-848 consumer group would have saved them:
their own history replayed through the coordinator's core as a consumer group with <code>{{ kip848_assignor }}</code>
(the migration what-if, below).</p>
<table><tr><th>group</th><th>protocol</th><th class="n">rebalances</th><th class="n">unowned p-s, actual</th>
<th class="n">as KIP-848</th><th class="n">saved</th><th class="n">saved %</th></tr>
{% for g in data.migrate_first %}<tr><td>{{ g.group_id }}</td><td>{{ g.protocol }}</td><td class="n">{{ g.actual_rebalances | num }}</td>
<td class="n">{{ g.actual_unowned_partition_seconds | num(1) }}</td><td class="n">{{ g.whatif_unowned_partition_seconds | num(1) }}</td>
<td class="n">{{ g.saved_unowned_partition_seconds | num(1) }}</td><td class="n">{{ g.saved_unowned_partition_seconds | pct(g.actual_unowned_partition_seconds) }}</td></tr>
{% else %}<tr><td colspan="7">no classic group</td></tr>{% endfor %}</table></section>

<section><h2>Overview</h2>
{% for f in filters %}{% set s = summary[f] %}<div class="v-{{ f }}"><div class="cards">
<div class="card"><b>{{ s.groups | num }}</b><span>{{ labels[f] }}</span></div>
<div class="card"><b>{{ s.rebalances | num }}</b><span>rebalances (epoch bumps, generations)</span></div>
<div class="card"><b>{{ s.rebalances_stopping_nobody | num }}</b><span>rebalances that stopped nobody</span></div>
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
{{ s.group_deleted | num }} ended by the group's deletion or conversion.</p></div>{% endfor %}</section>

<section><h2>Rebalances over time, by cause</h2>
<p class="note">Each step: the rebalances (consumer group epoch bumps, classic generations) in a {{ bucket }} interval,
coloured by what caused them.</p>
{% for f in filters %}<div class="v-{{ f }}">{{ plots["causes_" + f] }}
<table><tr><th>cause</th><th class="n">rebalances</th></tr>
{% for r in by_cause[f] %}<tr><td>{{ r.cause }}</td><td class="n">{{ r.count | num }}</td></tr>{% endfor %}
</table></div>{% endfor %}</section>

<section><h2>Time to converge</h2>
<p class="note">Consumer groups: from each epoch bump until every member had reconciled to the group's epoch (or the
group had no member left). Classic groups: from PreparingRebalance until the generation was Stable.</p>
{% for f in filters %}<div class="v-{{ f }}">{{ plots["converge_" + f] }}</div>{% endfor %}</section>

<section><h2>Classic rebalances: join and sync phases</h2>
<p class="note">PreparingRebalance → CompletingRebalance (every member rejoined, or the rebalance timeout) → Stable
(the leader's SyncGroup), from the GroupMetadata records. Eager members give up every partition when they rejoin;
cooperative ones only what moves, then rejoin once more.</p>
<table><tr><th>protocol</th><th class="n">rebalances</th><th class="n">join p50</th><th class="n">join p95</th>
<th class="n">sync p50</th><th class="n">sync p95</th><th class="n">converge p50</th><th class="n">p95</th><th class="n">max</th>
<th class="n">members stopped (mean)</th></tr>
{% for r in data.classic_phases %}<tr><td>{{ r.protocol }}</td><td class="n">{{ r.rebalances | num }}</td>
<td class="n">{{ r.join_ms[0] | ms }}</td><td class="n">{{ r.join_ms[1] | ms }}</td><td class="n">{{ r.sync_ms[0] | ms }}</td>
<td class="n">{{ r.sync_ms[1] | ms }}</td><td class="n">{{ r.time_to_converge_ms[0] | ms }}</td><td class="n">{{ r.time_to_converge_ms[1] | ms }}</td>
<td class="n">{{ r.max_ms | ms }}</td><td class="n">{{ r.members_stopped | num(1) }}</td></tr>
{% else %}<tr><td colspan="10">no classic rebalance with its phases recorded</td></tr>{% endfor %}</table>
{{ plots.classic_phases }}</section>

<section><h2>Partitions moved and unowned partition-seconds per rebalance</h2>
<p class="note">Moved: partitions whose owner changed from one member to another that stayed. Unowned: from the moment a
partition's owner released it (eager classic: the rebalance's start) until a member owned it again.
{% if data.scatter | length >= max_points %}A random sample of {{ max_points }} rebalances.{% endif %}</p>
{{ plots.scatter }}</section>

<section><h2>Migrations</h2>
<p class="note">Upgrades (a classic group becomes a consumer group when a KIP-848 consumer joins it) and downgrades (the
last KIP-848 consumer leaves a group of classic members), with the mixed phase around each (a consumer group with
classic members) and what it cost: the rebalances of the mixed phase, and for a downgrade the classic rebalance it starts.</p>
<table><tr><th>time</th><th>group</th><th>direction</th><th class="n">generation</th><th class="n">members converted</th>
<th>mixed phase</th><th class="n">lasted</th><th class="n">rebalances</th><th class="n">moved</th><th class="n">unowned p-s</th></tr>
{% for m in data.migrations %}<tr data-gt="mixed classic"><td>{{ m.timestamp | ts }}</td><td>{{ m.group_id }}</td><td>{{ m.direction }}</td>
<td class="n">{{ m.generation }}</td><td class="n">{{ m.members_converted }}</td><td>{{ m.mixed_outcome }}</td>
<td class="n">{{ m.mixed_ms | ms }}</td><td class="n">{{ m.rebalances | num }}</td><td class="n">{{ m.partitions_moved | num }}</td>
<td class="n">{{ m.unowned_partition_seconds | num(1) }}</td></tr>
{% else %}<tr><td colspan="10">no migration</td></tr>{% endfor %}</table></section>

<section><h2>Migration what-if: what would migrating have saved?</h2>
<p class="note">Each classic group's membership history (the same joins, leaves, timeouts and restarts, at the same
times) replayed through the coordinator's core as a KIP-848 consumer group with <code>{{ kip848_assignor }}</code>
and, for an eager group, as a cooperative classic group (cooperative-sticky): rebalances, those that stopped nobody,
partitions moved, unowned partition-seconds, time to converge (docs/analytics.md, <code>migration_whatif</code>).</p>
<table><tr><th>scenario</th><th class="n">groups</th><th class="n">rebalances</th><th class="n">stopped nobody</th>
<th class="n">moved</th><th class="n">unowned p-s</th><th class="n">saved</th></tr>
{% for sc in ["kip848", "cooperative"] %}{% set t = data.migration_totals.get(sc) %}{% if t %}
<tr><td>actual ({{ "all classic groups" if sc == "kip848" else "eager groups" }})</td><td class="n">{{ t.groups | num }}</td><td class="n">{{ t.actual_rebalances | num }}</td>
<td class="n">{{ t.actual_stopping_nobody | num }}</td><td class="n">{{ t.actual_partitions_moved | num }}</td><td class="n">{{ t.actual_unowned | num(1) }}</td><td class="n"></td></tr>
<tr class="total"><td>as {{ "KIP-848 (" + t.assignor + ")" if sc == "kip848" else "cooperative" }}</td><td class="n">{{ t.groups | num }}</td>
<td class="n">{{ t.whatif_rebalances | num }}</td><td class="n">{{ t.whatif_stopping_nobody | num }}</td><td class="n">{{ t.whatif_partitions_moved | num }}</td>
<td class="n">{{ t.whatif_unowned | num(1) }}</td><td class="n">{{ (t.actual_unowned - t.whatif_unowned) | num(1) }} ({{ (t.actual_unowned - t.whatif_unowned) | pct(t.actual_unowned) }})</td></tr>{% endif %}{% endfor %}
</table>
{{ plots.migration }}
<table><tr><th rowspan="2">group</th><th rowspan="2">protocol</th><th colspan="4">actual</th>
<th colspan="4">as KIP-848</th><th colspan="2">as cooperative</th></tr>
<tr><th class="n">rebalances</th><th class="n">stopped nobody</th><th class="n">unowned p-s</th><th class="n">converge p50</th>
<th class="n">rebalances</th><th class="n">stopped nobody</th><th class="n">unowned p-s</th><th class="n">converge p50</th>
<th class="n">unowned p-s</th><th class="n">converge p50</th></tr>
{% for g in migration_rows %}{% set k = g.kip848 %}{% set c = g.cooperative %}<tr><td>{{ g.group_id }}</td><td>{{ g.protocol }}</td>
<td class="n">{{ g.actual.actual_rebalances | num }}</td><td class="n">{{ g.actual.actual_rebalances_stopping_nobody | num }}</td>
<td class="n">{{ g.actual.actual_unowned_partition_seconds | num(1) }}</td><td class="n">{{ g.actual.actual_converge_p50_ms | ms }}</td>
<td class="n">{{ k.whatif_rebalances | num }}</td><td class="n">{{ k.whatif_rebalances_stopping_nobody | num }}</td>
<td class="n">{{ k.whatif_unowned_partition_seconds | num(1) }}</td><td class="n">{{ k.whatif_converge_p50_ms | ms }}</td>
<td class="n">{{ c.whatif_unowned_partition_seconds | num(1) }}</td><td class="n">{{ c.whatif_converge_p50_ms | ms }}</td></tr>
{% if k.error or c.error %}<tr><td></td><td colspan="11" class="note">replay error: {{ k.error or c.error }}</td></tr>{% endif %}
{% else %}<tr><td colspan="12">no classic group</td></tr>{% endfor %}</table></section>

<section><h2>Group timelines</h2><p class="note">The {{ timelines }} groups with the most rebalances: the group epoch
(or generation) over time, each rebalance coloured by cause.</p>{{ plots.timelines }}</section>

<section><h2>Member churn</h2>{{ plots.churn }}
<p class="note">Joins and removals (static restarts and conversions apart) per group type.</p>
{% for f in filters %}<div class="v-{{ f }}">
<table><tr><th>why members were removed</th><th class="n">members</th></tr>
{% for r in removals[f] %}<tr><td>{{ r.reason }}</td><td class="n">{{ r.count | num }}</td></tr>{% endfor %}
</table></div>{% endfor %}</section>

<section><h2>Offset commits</h2>{{ plots.commits }}
<p class="note">Committed-offset progress of the six group/topic pairs with the highest committed
offsets (the sum over the topic's partitions of the last committed offset).</p>
{{ plots.progress }}</section>

<section><h2>Assignor what-if: {{ w.assignor or assignor }}</h2>
<p class="note">Every target assignment computed for a consumer group in the journal ({{ w.computations | num }}) was
recomputed with <code>{{ assignor }}</code>, fed the same members and subscriptions and its own
previous targets. Partitions moved: {{ w.actual_moved | num }} actual, {{ w.whatif_moved | num }}
with {{ assignor }}. Average spread (most minus least loaded member): {{ w.actual_spread | num(2) }}
actual, {{ w.whatif_spread | num(2) }} with {{ assignor }}.{% if w.errors %} The assignor failed
{{ w.errors }} times.{% endif %}</p>{{ plots.whatif }}</section>

<section><h2>Groups with the most rebalances</h2><table>
<tr><th>group</th><th>type</th><th class="n">rebalances</th><th class="n">joins</th><th class="n">left</th>
<th class="n">fenced (session)</th><th class="n">fenced (rebalance)</th><th class="n">left or session</th>
<th class="n">static restarts</th><th class="n">moved</th><th class="n">unowned p-s</th>
<th class="n">converge p50</th><th class="n">p95</th><th class="n">max</th><th class="n">commits</th></tr>
{% for g in data.top_groups %}<tr data-gt="{{ g.group_type }}"><td>{{ g.group_id }}</td><td><span class="gt gt-{{ g.group_type }}">{{ g.group_type }}</span> {{ g.protocol }}</td>
<td class="n">{{ g.rebalances | num }}</td><td class="n">{{ g.joins | num }}</td><td class="n">{{ g.member_left | num }}</td>
<td class="n">{{ g.member_fenced_session_timeout | num }}</td><td class="n">{{ g.member_fenced_rebalance_timeout | num }}</td>
<td class="n">{{ g.member_left_or_session_timeout | num }}</td><td class="n">{{ g.static_restarts | num }}</td>
<td class="n">{{ g.partitions_moved | num }}</td><td class="n">{{ g.unowned_partition_seconds | num(1) }}</td>
<td class="n">{{ g.p50_ms | ms }}</td><td class="n">{{ g.p95_ms | ms }}</td><td class="n">{{ g.max_ms | ms }}</td>
<td class="n">{{ g.commits | num }}</td></tr>{% endfor %}</table></section>

<section><h2>Latest rebalances</h2><table>
<tr><th>time</th><th>group</th><th>type</th><th class="n">epoch / gen.</th><th>cause</th><th>members</th><th class="n">after</th>
<th class="n">moved</th><th class="n">unowned p-s</th><th class="n">converged in</th><th>outcome</th></tr>
{% for r in data.recent %}<tr data-gt="{{ r.group_type }}"><td>{{ r.timestamp | ts }}</td><td>{{ r.group_id }}</td>
<td><span class="gt gt-{{ r.group_type }}">{{ r.group_type }}</span> {{ r.protocol }}</td><td class="n">{{ r.group_epoch }}</td>
<td>{{ r.cause }}</td><td>{% for m in r.members_joined %}+{{ m }} {% endfor %}{% for m in r.members_removed %}−{{ m.member_id }} ({{ m.reason }}) {% endfor %}</td>
<td class="n">{{ r.members_after }}</td><td class="n">{{ r.partitions_moved | num }}</td>
<td class="n">{{ r.unowned_partition_seconds | num(1) }}</td><td class="n">{{ r.time_to_converge_ms | ms }}</td><td>{{ r.outcome }}</td></tr>{% endfor %}
</table></section>

<section><h2>Tables</h2><p class="note">Every metric is also a Parquet table under
<code>tables/</code> beside this page: {% for t in tables %}<code>{{ t }}</code>{{ ", " if not loop.last }}{% endfor %}
(docs/analytics.md defines each column).</p></section>
</main></body></html>
"""


def _by_cause(series: list[dict[str, Any]]) -> list[dict[str, Any]]:
    counts: dict[str, int] = {}
    for r in series:
        counts[r["cause"]] = counts.get(r["cause"], 0) + r["count"]
    return [
        {"cause": c, "count": n} for c, n in sorted(counts.items(), key=lambda x: (-x[1], x[0]))
    ]


def _summed(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    out: dict[str, int] = {}
    for r in rows:
        out[r[key]] = out.get(r[key], 0) + r["count"]
    return [{key: k, "count": n} for k, n in sorted(out.items(), key=lambda x: (-x[1], x[0]))]


def render(
    data: dict[str, Any],
    *,
    info: Any,
    input_path: str,
    assignor: str,
    rows: int,
    tables: Sequence[str],
) -> str:
    """The page; ``tables``: the names of the tables written beside it (``OUT/tables/``)."""
    import jinja2
    from markupsafe import Markup

    env = jinja2.Environment(autoescape=True, undefined=jinja2.ChainableUndefined)
    env.filters.update(num=_num, ms=_ms, ts=_ts, pct=_pct)
    per = _dur(data["bucket_s"])
    p: dict[str, str] = {}
    for f in FILTERS:
        p[f"causes_{f}"] = plots.cause_series(
            filtered(data["cause_series"], f), data["bucket_s"], per
        )
        p[f"converge_{f}"] = plots.converge_hist(
            filtered(data["converge_hist"], f), data["summary"].get(f, {})
        )
    p["churn"] = plots.lines_by_type(
        data["churn"], "bucket_start", ["joins", "removals"], f"members per {per}"
    )
    p["commits"] = plots.lines_by_type(
        data["commits"], "bucket_start", ["commits"], f"commits per {per}"
    )
    p["scatter"] = plots.scatter(data["scatter"])
    p["timelines"] = plots.timelines(data["timelines"])
    p["progress"] = plots.progress(data["progress"])
    p["whatif"] = plots.paired_bars(
        data["whatif_groups"],
        [
            ("actual_moved", "actual", "#1f77b4"),
            ("whatif_moved", f"what-if: {assignor}", "#ff7f0e"),
        ],
        "partitions moved (all rebalances)",
    )
    p["protocol_cost"] = plots.protocol_cost(data["protocol_cost"])
    p["classic_phases"] = plots.classic_phases(data["classic_points"])
    p["migration"] = plots.paired_bars(
        _migration_bars(data["migration_groups"]),
        [
            ("actual", "actual", plots.SCENARIO_COLORS["actual"]),
            (KIP848, f"as KIP-848 ({assignor})", plots.SCENARIO_COLORS[KIP848]),
            (COOPERATIVE, "as cooperative (eager groups)", plots.SCENARIO_COLORS[COOPERATIVE]),
        ],
        "unowned partition-seconds",
    )
    fleet_types = dict.fromkeys((CONSUMER, MIXED, CLASSIC), 0)
    fleet_protocols = {EAGER: 0, COOPERATIVE: 0}
    for r in data["fleet"]:
        fleet_types[r["group_type"]] = fleet_types.get(r["group_type"], 0) + r["groups"]
        if r["group_type"] == CLASSIC:
            fleet_protocols[r["protocol"]] = fleet_protocols.get(r["protocol"], 0) + r["groups"]
    migration_counts = {"upgrade": 0, "downgrade": 0}
    for m in data["migrations"]:
        migration_counts[m["direction"]] += 1
    costly = [r for r in data["protocol_cost"] if r["unowned_partition_seconds"]]
    times = [r["bucket"] for r in data["cause_series"]] + [
        r["bucket_start"] for r in data["commits"]
    ]
    kip848 = data["migration_totals"].get(KIP848)
    return env.from_string(TEMPLATE).render(
        data=data,
        summary={f: data["summary"].get(f, {}) for f in FILTERS},
        by_cause={f: _by_cause(filtered(data["cause_series"], f)) for f in FILTERS},
        removals={f: _summed(filtered(data["removals"], f), "reason") for f in FILTERS},
        w=data["whatif_total"],
        plots={k: Markup(v) for k, v in p.items()},  # our own SVG, not user text
        filters=FILTERS,
        labels=TYPE_LABELS,
        fleet_types=fleet_types,
        fleet_protocols=fleet_protocols,
        migration_counts=migration_counts,
        costliest=costly[0] if costly else None,
        kip848_assignor=kip848["assignor"] if kip848 else assignor,
        migration_rows=_migration_rows(data["migration_groups"]),
        info=info,
        input_path=input_path,
        rows=rows,
        assignor=assignor,
        bucket=per,
        first=_ts(min(times)) if times else "–",
        last=_ts(max(times)) if times else "–",
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        tables=tables,
        max_points=MAX_POINTS,
        timelines=TIMELINE_GROUPS,
    )


def _migration_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The what-if's rows per classic group: ``actual`` and each scenario's row, by what the
    group's rebalances actually cost."""
    by: dict[str, dict[str, Any]] = {}
    for r in rows:
        g = by.setdefault(
            r["group_id"], {"group_id": r["group_id"], "protocol": r["protocol"], "actual": r}
        )
        g[r["scenario"]] = r
    return sorted(
        by.values(),
        key=lambda g: (-(g["actual"]["actual_unowned_partition_seconds"] or 0), g["group_id"]),
    )


def _migration_bars(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per classic group: actual, as KIP-848 and as cooperative unowned partition-seconds."""
    return [
        {
            "group_id": g["group_id"],
            "actual": g["actual"]["actual_unowned_partition_seconds"],
            **{
                sc: g[sc]["whatif_unowned_partition_seconds"]
                for sc in (KIP848, COOPERATIVE)
                if sc in g
            },
        }
        for g in _migration_rows(rows)
    ][:25]
