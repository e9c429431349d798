"""KIP-848 consumer groups: their rebalances (group epoch bumps) read from the journal as Spark
DataFrame jobs (docs/analytics.md, "How the journal is read").

The key construction is the *epoch sequence*: for every consumer group record,
``epoch_seq`` = the number of ConsumerGroupMetadata records of the group at or before it. The
records of the command that bumped the group epoch to the k-th ConsumerGroupMetadata record are
exactly the group's records with ``epoch_seq = k - 1`` (every membership or subscription change
bumps the epoch in the same command, so nothing else lies between two such records), and the
records that follow the bump (target assignment, reconciliation) have ``epoch_seq = k``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .common import (
    CONSUMER,
    CONVERTED,
    FENCED_REBALANCE,
    FENCED_SESSION,
    LEFT,
    LEFT_OR_SESSION,
    MIXED,
    MOVED,
    REMOVED,
    REPLACED,
    SESSION_TIMEOUT_CONFIG,
    STRINGS,
    TPS,
    UNKNOWN_CAUSE,
    Params,
    interval_columns,
    ownership_intervals,
    stage,
    tps,
    ts,
)


def _epoch_seq(g: DataFrame) -> DataFrame:
    """Adds, from the group's records in offset order: ``epoch_seq`` (ConsumerGroupMetadata
    records at or before the row), ``epoch`` (the group epoch in force: that of the last such
    record, null after a group tombstone), ``session_cfg`` (the dynamic session timeout the
    group's partition holds, from GroupConfig records as earlier versions wrote them: null for
    none; :func:`_session_in_force` weighs it against the cluster log's), ``next3`` (the next
    ConsumerGroupMetadata record: offset, time, tombstone) and ``classic_gone_ts`` (time of the
    last classic group tombstone, i.e. of an upgrade). A Config record of the group (the
    cluster log's) has an offset of another log: its row's values mean nothing."""
    w = Window.partitionBy("group_id").orderBy("offset")
    upto = w.rowsBetween(Window.unboundedPreceding, 0)
    t = F.col("record_type_id")
    is3 = t == 3
    cfg = F.when(
        (t == 1016) & (F.col("config_name") == SESSION_TIMEOUT_CONFIG),
        F.coalesce(F.col("config_value"), F.lit("default")),
    )
    out = (
        g.withColumn("epoch_seq", F.sum(F.when(is3, 1).otherwise(0)).over(upto))
        .withColumn(
            "epoch",
            F.last(F.when(is3, F.coalesce(F.col("group_epoch"), F.lit(-1))), ignorenulls=True).over(
                upto
            ),
        )
        .withColumn("epoch", F.when(F.col("epoch") >= 0, F.col("epoch")))
        .withColumn("session_cfg", F.last(cfg, ignorenulls=True).over(upto))
        .withColumn(
            "session_cfg",
            F.when(F.col("session_cfg") != "default", F.col("session_cfg").cast("long")),
        )
        .withColumn(
            # Frames that reach forward are growing frames in reverse order: linear, where an
            # UNBOUNDED FOLLOWING frame would be recomputed for every row.
            "next3",
            F.last(F.when(is3, F.struct("offset", "ts_ms", "tombstone")), ignorenulls=True).over(
                Window.partitionBy("group_id")
                .orderBy(F.col("offset").desc())
                .rowsBetween(Window.unboundedPreceding, -1)
            ),
        )
        .withColumn(
            "classic_gone_ts",
            F.last(F.when((t == 2) & F.col("tombstone"), F.col("ts_ms")), ignorenulls=True).over(
                upto
            ),
        )
    )
    return out


def _cluster_configs(rows: DataFrame) -> DataFrame:
    """The group configs of the cluster log (Config records, in its offset order): after each
    record of a group, ``cluster_cfg``: whether the cluster log names any config of the group
    (``named``) and the session timeout it sets (``session``: null for none)."""
    c = rows.filter(F.col("record_type_id") == 1104).select(
        "group_id", "offset", "ts_ms", "config_name", "config_value"
    )
    live = F.col("config_value").isNotNull()
    was_live = F.lag(live).over(Window.partitionBy("group_id", "config_name").orderBy("offset"))
    upto = (
        Window.partitionBy("group_id").orderBy("offset").rowsBetween(Window.unboundedPreceding, 0)
    )
    session = F.last(
        F.when(
            F.col("config_name") == SESSION_TIMEOUT_CONFIG,
            F.coalesce(F.col("config_value"), F.lit("default")),
        ),
        ignorenulls=True,
    ).over(upto)
    return (
        c.withColumn("d_named", live.cast("int") - F.coalesce(was_live, F.lit(False)).cast("int"))
        .withColumn("named", F.sum("d_named").over(upto) > 0)
        .withColumn("session", F.when(session != "default", session.cast("long")))
        .select(
            "group_id",
            "offset",
            "ts_ms",
            F.struct("named", "session").alias("cluster_cfg"),
        )
    )


def _session_in_force(m: DataFrame, rows: DataFrame) -> DataFrame:
    """``m`` (records of the groups' partitions with ``session_cfg``) with ``session_cfg``
    replaced by the group's dynamic session timeout in force at each row, as the coordinator
    reads its group configs: the cluster log's when it names any config of the group, else the
    partition's (an earlier version's GroupConfig records, which the runtime moves into the
    cluster log when it loads the partition). The cluster log's Config records are another
    log: they count in the group's timeline by time, the state after the latest one (by time,
    then by the cluster log's offset) at or before the row's time, so a record at the same
    millisecond as the row counts. One sort of the rows with the groups' Config records."""
    cfg = _cluster_configs(rows).withColumn("is_cfg", F.lit(True))
    w = (
        Window.partitionBy("group_id")
        .orderBy("ts_ms", F.col("is_cfg").desc(), "offset")
        .rowsBetween(Window.unboundedPreceding, 0)
    )
    both = m.withColumn("is_cfg", F.lit(False)).unionByName(cfg, allowMissingColumns=True)
    cluster = F.last("cluster_cfg", ignorenulls=True).over(w)
    return (
        both.withColumn("cluster_cfg", cluster)
        .filter(~F.col("is_cfg"))
        .withColumn(
            "session_cfg",
            F.when(F.col("cluster_cfg.named"), F.col("cluster_cfg.session")).otherwise(
                F.col("session_cfg")
            ),
        )
        .drop("is_cfg", "cluster_cfg")
    )


def _member_events(rows: DataFrame, params: Params) -> DataFrame:
    """One row per ConsumerGroupMemberMetadata record with its meaning: ``kind`` join /
    subscription_changed / assignor_changed / removed / null (no change that matters), plus
    for removals the facts that say why (last reconciliation record, last activity, session
    timeout in force) and the resulting ``reason``."""
    w_m = Window.partitionBy("group_id", "member_id").orderBy("offset")
    before = w_m.rowsBetween(Window.unboundedPreceding, -1)
    t = F.col("record_type_id")
    live = ~F.col("tombstone")
    # Facts about the member from its earlier records (types 5 and 8).
    m = rows.filter((t == 5) | (t == 8)).select(
        "group_id",
        "member_id",
        "offset",
        "ts_ms",
        "record_type_id",
        "tombstone",
        "epoch_seq",
        "instance_id",
        "subscribed_topic_names",
        "subscribed_topic_regex",
        "server_assignor",
        "rebalance_timeout_ms",
        "classic_member",
        "classic_session_timeout_ms",
        "member_epoch",
        "member_state",
        "session_cfg",
        "next3",
        "classic_gone_ts",
    )
    is5live = (t == 5) & live
    is8live = (t == 8) & live
    m = (
        m.withColumn("prev5_live", F.last(F.when(t == 5, live), ignorenulls=True).over(before))
        .withColumn(
            "prev_names",
            F.last(F.when(is5live, F.col("subscribed_topic_names")), ignorenulls=True).over(before),
        )
        .withColumn(
            "prev_regex",
            F.last(
                F.when(is5live, F.coalesce(F.col("subscribed_topic_regex"), F.lit(""))),
                ignorenulls=True,
            ).over(before),
        )
        .withColumn(
            "prev_assignor",
            F.last(
                F.when(is5live, F.coalesce(F.col("server_assignor"), F.lit(""))), ignorenulls=True
            ).over(before),
        )
        .withColumn(
            "prev_instance",
            F.last(F.when(is5live, F.col("instance_id")), ignorenulls=True).over(before),
        )
        .withColumn(
            "prev_rebalance_timeout",
            F.last(F.when(is5live, F.col("rebalance_timeout_ms")), ignorenulls=True).over(before),
        )
        .withColumn(
            "prev_classic_session",
            F.last(F.when(is5live, F.col("classic_session_timeout_ms")), ignorenulls=True).over(
                before
            ),
        )
        .withColumn(
            "last8_ts", F.last(F.when(is8live, F.col("ts_ms")), ignorenulls=True).over(before)
        )
        .withColumn(
            "last8_state",
            F.last(F.when(is8live, F.col("member_state")), ignorenulls=True).over(before),
        )
        .withColumn(
            "last8_epoch",
            F.last(F.when(is8live, F.col("member_epoch")), ignorenulls=True).over(before),
        )
        .withColumn(
            "last_active_ts", F.last(F.when(live, F.col("ts_ms")), ignorenulls=True).over(before)
        )
        .withColumn(
            "prev_classic",
            F.last(
                F.when(is5live, F.coalesce(F.col("classic_member"), F.lit(False))),
                ignorenulls=True,
            ).over(before),
        )
        .filter(t == 5)
    )
    m = _session_in_force(m, rows)
    was_live = F.coalesce(F.col("prev5_live"), F.lit(False))
    # Whether the member speaks the classic protocol as of this record (for a removal: what it
    # was), and how the group's count of classic members changes here (a mixed group has some).
    was_classic = was_live & F.coalesce(F.col("prev_classic"), F.lit(False))
    is_classic = live & F.coalesce(F.col("classic_member"), F.lit(False))
    m = m.withColumn("classic_member", F.when(live, is_classic).otherwise(was_classic)).withColumn(
        "d_classic", is_classic.cast("int") - was_classic.cast("int")
    )
    m = m.withColumn(
        "kind",
        F.when(live & ~was_live, "join")
        .when(F.col("tombstone") & was_live, "removed")
        .when(
            live
            & (
                ~F.col("subscribed_topic_names").eqNullSafe(F.col("prev_names"))
                | (F.coalesce(F.col("subscribed_topic_regex"), F.lit("")) != F.col("prev_regex"))
            ),
            "subscription_changed",
        )
        .when(
            live & (F.coalesce(F.col("server_assignor"), F.lit("")) != F.col("prev_assignor")),
            "assignor_changed",
        ),
    ).withColumn("inst", F.coalesce(F.col("instance_id"), F.col("prev_instance")))
    # Static member replacement: the old incarnation's removal and the new one's join, one
    # after the other in the same command (same instance id, same time).
    w_i = Window.partitionBy("group_id", "inst").orderBy("offset")
    m = (
        m.withColumn("prev_i_kind", F.lag("kind").over(w_i))
        .withColumn("prev_i_member", F.lag("member_id").over(w_i))
        .withColumn("prev_i_ts", F.lag("ts_ms").over(w_i))
        .withColumn("next_i_kind", F.lead("kind").over(w_i))
        .withColumn("next_i_member", F.lead("member_id").over(w_i))
        .withColumn("next_i_ts", F.lead("ts_ms").over(w_i))
    )
    has_inst = F.col("inst").isNotNull()
    false = F.lit(False)
    m = m.withColumn(
        "replacing",
        F.coalesce(
            has_inst
            & (F.col("kind") == "join")
            & (F.col("prev_i_kind") == "removed")
            & (F.col("prev_i_member") != F.col("member_id"))
            & (F.col("prev_i_ts") == F.col("ts_ms")),
            false,
        ),
    ).withColumn(
        "replaced",
        F.coalesce(
            has_inst
            & (F.col("kind") == "removed")
            & (F.col("next_i_kind") == "join")
            & (F.col("next_i_member") != F.col("member_id"))
            & (F.col("next_i_ts") == F.col("ts_ms")),
            false,
        ),
    )
    m = m.withColumn("replaced_by", F.when(F.col("replaced"), F.col("next_i_member"))).withColumn(
        "replaces", F.when(F.col("replacing"), F.col("prev_i_member"))
    )
    # The session timeout in force: a classic member's own, else the group's dynamic config,
    # else the server default of the export.
    session = F.coalesce(
        F.col("prev_classic_session").cast("long"),
        F.col("session_cfg"),
        F.lit(params.session_timeout_ms).cast("long"),
    )
    m = m.withColumn("session_timeout_ms", session)
    # Conversions: removals that end the consumer group at once (downgrade to a classic group)
    # and joins that create it from a classic group (upgrade).
    m = m.withColumn(
        "converted",
        F.coalesce(
            (
                (F.col("kind") == "removed")
                & F.col("next3.tombstone")
                & (F.col("next3.ts_ms") == F.col("ts_ms"))
            )
            # An upgrade converts the classic members; the consumer whose heartbeat asked for
            # it joins in the same command, and that is a join.
            | (
                (F.col("kind") == "join")
                & (F.col("classic_gone_ts") == F.col("ts_ms"))
                & F.col("classic_member")
            ),
            F.lit(False),
        ),
    )
    removed = F.col("kind") == "removed"
    reason = (
        F.when(removed & F.col("replaced"), REPLACED)
        .when(removed & F.col("converted"), CONVERTED)
        .when(
            removed
            & (F.col("last8_state") == "UNREVOKED_PARTITIONS")
            & (F.col("ts_ms") >= F.col("last8_ts") + F.col("prev_rebalance_timeout")),
            FENCED_REBALANCE,
        )
        .when(
            removed
            & (F.col("last8_epoch") == -2)
            & (F.col("ts_ms") >= F.col("last8_ts") + F.col("session_timeout_ms")),
            FENCED_SESSION,
        )
        .when(
            removed & (F.col("last_active_ts") > F.col("ts_ms") - F.col("session_timeout_ms")), LEFT
        )
        .when(removed, LEFT_OR_SESSION)
    )
    live_classic = F.sum("d_classic").over(
        Window.partitionBy("group_id").orderBy("offset").rowsBetween(Window.unboundedPreceding, 0)
    )
    m = m.withColumn("live_classic", live_classic)
    # Mixed while a classic member is in the group (its own removal included).
    mixed = (F.col("live_classic") > 0) | (F.col("d_classic") < 0)
    return m.withColumn("reason", reason).select(
        "group_id",
        F.when(mixed, F.lit(MIXED)).otherwise(F.lit(CONSUMER)).alias("group_type"),
        "member_id",
        "offset",
        "ts_ms",
        "epoch_seq",
        "kind",
        "reason",
        "inst",
        "replacing",
        "replaced",
        "converted",
        "replaced_by",
        "replaces",
        "classic_member",
        "d_classic",
        "live_classic",
        "last8_ts",
        "last8_epoch",
        "session_timeout_ms",
    )


def _bumps(rows: DataFrame, members: DataFrame, params: Params) -> DataFrame:
    """One row per group epoch bump with its cause and the members involved."""
    t = F.col("record_type_id")
    w3 = Window.partitionBy("group_id").orderBy("offset")
    r3 = rows.filter(t == 3).select(
        "group_id", "offset", "ts_ms", "tombstone", "group_epoch", "epoch_seq"
    )
    r3 = (
        r3.withColumn("prev_epoch", F.lag("group_epoch").over(w3))
        .withColumn("prev_exists", F.lag("offset").over(w3).isNotNull())
        .withColumn("next_offset", F.lead("offset").over(w3))
        .withColumn("next_epoch", F.lead("group_epoch").over(w3))
        .withColumn("next_tombstone", F.lead("tombstone").over(w3))
    )
    # What the command before each ConsumerGroupMetadata record changed (epoch_seq = k - 1).
    ev = members.filter(F.col("kind").isNotNull())
    joined = F.col("kind") == "join"
    ev_agg = ev.groupBy("group_id", "epoch_seq").agg(
        F.array_sort(
            F.collect_list(
                F.when(joined & ~F.col("replacing") & ~F.col("converted"), F.col("member_id"))
            )
        ).alias("joined"),
        F.array_sort(
            F.collect_list(
                F.when(
                    (F.col("kind") == "removed") & ~F.col("replaced"),
                    F.struct(
                        F.col("member_id").alias("member_id"), F.col("reason").alias("reason")
                    ),
                )
            )
        ).alias("removed"),
        F.array_sort(
            F.collect_list(F.when(F.col("kind") == "subscription_changed", F.col("member_id")))
        ).alias("subscription_changed"),
        F.array_sort(
            F.collect_list(F.when(F.col("kind") == "assignor_changed", F.col("member_id")))
        ).alias("assignor_changed"),
    )
    other = (
        rows.filter(t.isin(2, 4, 16))
        .groupBy("group_id", "epoch_seq")
        .agg(
            F.max(F.when((t == 2) & F.col("tombstone"), 1).otherwise(0)).alias(
                "has_classic_tombstone"
            ),
            F.max(F.when(t == 4, 1).otherwise(0)).alias("has_partition_metadata"),
            F.max(F.when(t == 16, 1).otherwise(0)).alias("has_regex"),
        )
    )
    cause_rows = ev_agg.join(other, on=["group_id", "epoch_seq"], how="full_outer").withColumn(
        "epoch_seq", F.col("epoch_seq") + 1
    )
    b = r3.join(cause_rows, on=["group_id", "epoch_seq"], how="left")
    created = F.col("prev_epoch").isNull()
    migrated = F.coalesce(F.col("has_classic_tombstone"), F.lit(0)) == 1
    is_bump = ~F.col("tombstone") & (
        (~created & (F.col("group_epoch") > F.col("prev_epoch")))
        | (
            created
            & (
                F.col("prev_exists")
                | F.lit(params.complete)
                | (F.col("group_epoch") <= 1)
                | migrated
            )
        )
    )
    b = b.filter(is_bump)
    for c in ("joined", "subscription_changed", "assignor_changed"):
        b = b.withColumn(c, F.coalesce(F.col(c), F.array().cast(STRINGS)))
    b = b.withColumn("removed", F.coalesce(F.col("removed"), F.array().cast(REMOVED)))
    reasons = F.transform(F.col("removed"), lambda x: x["reason"])
    member_change = (
        (F.size("joined") > 0)
        | (F.size("removed") > 0)
        | (F.size("subscription_changed") > 0)
        | (F.size("assignor_changed") > 0)
    )
    flags = [
        F.when(migrated, F.lit("migrated_from_classic")),
        F.when((F.size("joined") > 0) & ~migrated, F.lit("member_joined")),
        F.when(F.array_contains(reasons, FENCED_SESSION), F.lit(FENCED_SESSION)),
        F.when(F.array_contains(reasons, FENCED_REBALANCE), F.lit(FENCED_REBALANCE)),
        F.when(F.array_contains(reasons, LEFT), F.lit(LEFT)),
        F.when(F.array_contains(reasons, LEFT_OR_SESSION), F.lit(LEFT_OR_SESSION)),
        F.when(F.size("subscription_changed") > 0, F.lit("subscription_changed")),
        F.when(F.size("assignor_changed") > 0, F.lit("assignor_changed")),
        F.when(
            ~member_change & ~migrated & (F.col("has_regex") == 1),
            F.lit("regex_resolution_changed"),
        ),
        F.when(
            ~member_change
            & ~migrated
            & (F.coalesce(F.col("has_regex"), F.lit(0)) == 0)
            & (F.col("has_partition_metadata") == 1),
            F.lit("topic_metadata_changed"),
        ),
    ]
    causes = F.filter(F.array(*flags), lambda x: x.isNotNull())
    b = b.withColumn("causes", causes).withColumn(
        "cause", F.coalesce(F.try_element_at(F.col("causes"), F.lit(1)), F.lit(UNKNOWN_CAUSE))
    )
    return b.select(
        "group_id",
        "epoch_seq",
        F.col("group_epoch"),
        F.col("prev_epoch").alias("previous_epoch"),
        "offset",
        "ts_ms",
        "cause",
        "causes",
        F.col("joined").alias("members_joined"),
        F.col("removed").alias("members_removed"),
        F.col("subscription_changed").alias("members_subscription_changed"),
        "next_offset",
        "next_epoch",
        "next_tombstone",
    )


def _convergence(rows: DataFrame, members: DataFrame) -> DataFrame:
    """For each ConsumerGroupMetadata record: when the group was next stable (every member
    reconciled to the group epoch in force, or no member left), how many members it had right
    after it, and whether some were classic members (the group is then mixed)."""
    t = F.col("record_type_id")
    w = Window.partitionBy("group_id").orderBy("offset")
    upto = w.rowsBetween(Window.unboundedPreceding, 0)
    delta_members = members.select(
        "group_id",
        "offset",
        F.when(F.col("kind") == "join", 1)
        .when(F.col("kind") == "removed", -1)
        .otherwise(0)
        .alias("d_live"),
        "d_classic",
    )
    r = (
        rows.filter(t.isin(3, 5, 8))
        .select(
            "group_id",
            "offset",
            "ts_ms",
            "record_type_id",
            "tombstone",
            "member_id",
            "member_epoch",
            "member_state",
            "epoch_seq",
            "epoch",
        )
        .join(delta_members, on=["group_id", "offset"], how="left")
    )
    r = r.withColumn(
        "live_members", F.sum(F.coalesce(F.col("d_live"), F.lit(0))).over(upto)
    ).withColumn("live_classic", F.sum(F.coalesce(F.col("d_classic"), F.lit(0))).over(upto))
    rec = F.when(
        (t == 8)
        & ~F.col("tombstone")
        & (F.col("member_state") == "STABLE")
        & (F.col("member_epoch") == F.col("epoch")),
        1,
    ).otherwise(0)
    w_rec = Window.partitionBy("group_id", "epoch_seq", "member_id").orderBy("offset")
    r = r.withColumn("rec", rec).withColumn(
        "d_rec",
        F.when(t == 8, F.col("rec") - F.coalesce(F.lag("rec").over(w_rec), F.lit(0))).otherwise(0),
    )
    w_seg = (
        Window.partitionBy("group_id", "epoch_seq")
        .orderBy("offset")
        .rowsBetween(Window.unboundedPreceding, 0)
    )
    r = r.withColumn("reconciled", F.sum("d_rec").over(w_seg))
    stable = F.col("epoch").isNotNull() & (F.col("live_members") == F.col("reconciled"))
    r = r.withColumn("stable", stable)
    after = (
        Window.partitionBy("group_id")
        .orderBy(F.col("offset").desc())
        .rowsBetween(Window.unboundedPreceding, 0)
    )
    r = r.withColumn(
        "next_stable",
        F.last(
            F.when(F.col("stable"), F.struct("offset", "ts_ms", "epoch")), ignorenulls=True
        ).over(after),
    )
    return r.filter(t == 3).select(
        "group_id",
        "offset",
        F.col("live_members").alias("members_after"),
        F.when(F.col("live_classic") > 0, F.lit(MIXED))
        .otherwise(F.lit(CONSUMER))
        .alias("group_type"),
        F.col("next_stable.offset").alias("stable_offset"),
        F.col("next_stable.ts_ms").alias("stable_ts_ms"),
        F.col("next_stable.epoch").alias("stable_epoch"),
    )


def _ownership_changes(rows: DataFrame, type_id: int, col: str) -> DataFrame:
    """Per record of a member's assignment (current: 8, target: 7): what it gained and lost
    against the member's previous record of the same type (a tombstone loses everything)."""
    w = Window.partitionBy("group_id", "member_id").orderBy("offset")
    r = rows.filter(F.col("record_type_id") == type_id)
    if type_id == 8:
        owned = F.array_union(tps("assigned_partitions"), tps("pending_revocation_partitions"))
    else:
        owned = tps(col)
    r = r.withColumn("owned", F.when(F.col("tombstone"), F.array().cast(TPS)).otherwise(owned))
    r = r.withColumn("prev_owned", F.lag("owned").over(w))
    prev = F.coalesce(F.col("prev_owned"), F.array().cast(TPS))
    return (
        r.withColumn("gained", F.array_except("owned", prev))
        .withColumn("lost", F.array_except(prev, "owned"))
        .withColumn("first", F.col("prev_owned").isNull())
    )


def _unowned_intervals(rows: DataFrame, bumps: DataFrame) -> DataFrame:
    """Each time a partition was released by its owner and later owned again: released and
    re-owned time, the members, and the bump it belongs to (the one in force when it was
    released; a release by a removed member belongs to the bump of that removal). ``bumps``
    carry their ``group_type``."""
    ch = _ownership_changes(rows, 8, "assigned_partitions").withColumn(
        "epoch_seq_attr",
        # A removed member's release belongs to the bump its removal makes.
        F.when(F.col("tombstone"), F.col("epoch_seq") + 1).otherwise(F.col("epoch_seq")),
    )
    keep = ("group_id", "offset", "ts_ms", "member_id", "epoch_seq_attr")
    iv = ownership_intervals(
        ch.select(*keep, F.explode("lost").alias("tp"), F.lit(0).alias("gain")).unionByName(
            ch.select(*keep, F.explode("gained").alias("tp"), F.lit(1).alias("gain"))
        )
    )
    b = bumps.select(
        "group_id", F.col("epoch_seq").alias("epoch_seq_attr"), "group_epoch", "group_type"
    )
    iv = iv.join(b, on=["group_id", "epoch_seq_attr"], how="left")
    return iv.select(
        *interval_columns(F.coalesce(F.col("group_type"), F.lit(CONSUMER)), F.col("group_epoch")),
        "epoch_seq_attr",
    )


def _target_moves(rows: DataFrame, members: DataFrame) -> DataFrame:
    """Per computation of the target assignment (one per bump at most, in the records after
    it): partitions moved from one live member to another, newly assigned, unassigned."""
    ch = _ownership_changes(rows, 7, "target_partitions").filter(~F.col("tombstone"))
    takeover = members.filter(F.col("replacing")).select(
        "group_id", "member_id", F.lit(True).alias("is_replacement")
    )
    ch = ch.join(takeover, on=["group_id", "member_id"], how="left").filter(
        ~(F.coalesce(F.col("is_replacement"), F.lit(False)) & F.col("first"))
    )
    rel = ch.select(
        "group_id", "epoch_seq", "member_id", F.explode("lost").alias("tp"), F.lit(0).alias("gain")
    )
    acq = ch.select(
        "group_id",
        "epoch_seq",
        "member_id",
        F.explode("gained").alias("tp"),
        F.lit(1).alias("gain"),
    )
    per_tp = (
        rel.unionByName(acq)
        .groupBy("group_id", "epoch_seq", "tp")
        .agg(
            F.max(F.when(F.col("gain") == 0, F.col("member_id"))).alias("from_member"),
            F.max(F.when(F.col("gain") == 1, F.col("member_id"))).alias("to_member"),
        )
    )
    moved = F.col("from_member").isNotNull() & F.col("to_member").isNotNull()
    return per_tp.groupBy("group_id", "epoch_seq").agg(
        F.sum(F.when(moved, 1).otherwise(0)).alias("partitions_moved"),
        # Members that must give partitions up (a live member's target lost them).
        F.countDistinct("from_member").alias("members_stopped"),
        F.sum(F.when(F.col("from_member").isNull(), 1).otherwise(0)).alias(
            "partitions_newly_assigned"
        ),
        F.sum(F.when(F.col("to_member").isNull(), 1).otherwise(0)).alias("partitions_unassigned"),
        F.array_sort(
            F.collect_list(
                F.when(
                    moved,
                    F.struct(
                        F.col("tp.topic").alias("topic"),
                        F.col("tp.partition").alias("partition"),
                        F.col("from_member").alias("from_member"),
                        F.col("to_member").alias("to_member"),
                    ),
                )
            )
        ).alias("moved"),
    )


def _rebalances(
    bumps: DataFrame, conv: DataFrame, moves: DataFrame, unowned: DataFrame
) -> DataFrame:
    # Milliseconds are summed as integers: a sum of doubles would depend on the order, and so
    # on the partitioning (local and cluster runs must give the same tables).
    u = (
        unowned.filter(F.col("ms") > 0)
        .groupBy("group_id", F.col("epoch_seq_attr").alias("epoch_seq"))
        .agg(
            F.sum("ms").alias("unowned_partition_ms"),
            F.count(F.lit(1)).alias("partitions_unowned"),
        )
    )
    r = (
        bumps.join(conv, on=["group_id", "offset"], how="left")
        .join(moves, on=["group_id", "epoch_seq"], how="left")
        .join(u, on=["group_id", "epoch_seq"], how="left")
    )
    ended_first = F.col("next_tombstone") & (
        F.col("stable_offset").isNull() | (F.col("next_offset") < F.col("stable_offset"))
    )
    outcome = (
        F.when(ended_first, "group_deleted")
        .when(F.col("stable_offset").isNull(), "in_progress")
        .when(F.col("stable_epoch") > F.col("group_epoch"), "superseded")
        .otherwise("converged")
    )
    r = r.withColumn("outcome", outcome)
    done = F.col("outcome").isin("converged", "superseded")
    after = F.coalesce(F.col("members_after"), F.lit(0))
    return r.select(
        "group_id",
        F.coalesce(F.col("group_type"), F.lit(CONSUMER)).alias("group_type"),
        F.lit(CONSUMER).alias("protocol"),
        "group_epoch",
        "previous_epoch",
        "offset",
        ts(F.col("ts_ms")).alias("timestamp"),
        "cause",
        "causes",
        "members_joined",
        "members_removed",
        "members_subscription_changed",
        (after - F.size("members_joined") + F.size("members_removed")).alias("members_before"),
        after.alias("members_after"),
        F.coalesce(F.col("members_stopped"), F.lit(0)).cast("long").alias("members_stopped"),
        F.coalesce(F.col("partitions_moved"), F.lit(0)).cast("long").alias("partitions_moved"),
        F.coalesce(F.col("partitions_newly_assigned"), F.lit(0))
        .cast("long")
        .alias("partitions_newly_assigned"),
        F.coalesce(F.col("partitions_unassigned"), F.lit(0))
        .cast("long")
        .alias("partitions_unassigned"),
        F.coalesce(F.col("moved"), F.array().cast(MOVED)).alias("moved"),
        (F.coalesce(F.col("unowned_partition_ms"), F.lit(0)) / 1000.0).alias(
            "unowned_partition_seconds"
        ),
        F.coalesce(F.col("unowned_partition_ms"), F.lit(0))
        .cast("long")
        .alias("unowned_partition_ms"),
        F.coalesce(F.col("partitions_unowned"), F.lit(0)).cast("long").alias("partitions_unowned"),
        "outcome",
        F.when(done, F.timestamp_micros(F.col("stable_ts_ms") * 1000)).alias("stable_at"),
        F.when(done, F.col("stable_ts_ms") - F.col("ts_ms")).alias("time_to_converge_ms"),
        F.when(F.col("outcome") == "superseded", F.col("stable_epoch")).alias("stable_epoch"),
        F.lit(None).cast("long").alias("join_ms"),
        F.lit(None).cast("long").alias("sync_ms"),
    )


def _removals(members: DataFrame) -> DataFrame:
    m = members.filter(F.col("kind") == "removed")
    return m.select(
        "group_id",
        "group_type",
        "member_id",
        F.col("inst").alias("instance_id"),
        "offset",
        F.timestamp_micros(F.col("ts_ms") * 1000).alias("timestamp"),
        "reason",
        F.coalesce(F.col("classic_member"), F.lit(False)).alias("classic_member"),
        "replaced_by",
        "session_timeout_ms",
    )


def _static_restarts(members: DataFrame) -> DataFrame:
    """A static member that came back under a new member id and took its place (no rebalance):
    when it left (its epoch -2 record, or its last record) and when it was back."""
    old = members.filter(F.col("replaced")).select(
        "group_id",
        "group_type",
        F.col("inst").alias("instance_id"),
        F.col("member_id").alias("old_member_id"),
        F.col("replaced_by").alias("new_member_id"),
        "ts_ms",
        "last8_ts",
        "last8_epoch",
    )
    left = F.when(F.col("last8_epoch") == -2, F.col("last8_ts"))
    return old.select(
        "group_id",
        "group_type",
        "instance_id",
        "old_member_id",
        "new_member_id",
        F.timestamp_micros(left * 1000).alias("left_at"),
        F.timestamp_micros(F.col("ts_ms") * 1000).alias("rejoined_at"),
        (F.col("ts_ms") - left).alias("downtime_ms"),
    )


@dataclass(frozen=True, slots=True)
class ConsumerFrames:
    """The consumer groups' part of the report (materialized where other tables reuse it)."""

    rows: DataFrame
    """The groups' records with ``epoch_seq`` and what :func:`_epoch_seq` derives."""
    members: DataFrame
    """One row per member metadata record: its meaning (``kind``, ``reason`` ...)."""
    rebalances: DataFrame
    unowned: DataFrame
    """The unowned intervals, with ``ms`` and ``epoch_seq_attr`` for the aggregates."""
    removals: DataFrame
    restarts: DataFrame


def tables(g: DataFrame, params: Params) -> ConsumerFrames:
    """The consumer groups' tables from ``g``: the group records of the journal (no commits)."""
    # Intermediate results used by several tables are materialized once, in order, with their
    # lineage cut (``stage``): the plans of the later steps stay small. Building a DataFrame
    # analyses its whole plan, and joins of frames derived from one another rewrite it, so with
    # the full lineage most of the report's time went into planning, not into the data.
    rows = stage(_epoch_seq(g))
    members = stage(_member_events(rows, params))
    bumps = stage(_bumps(rows, members, params))
    conv = stage(_convergence(rows, members))
    typed = bumps.join(conv.select("group_id", "offset", "group_type"), ["group_id", "offset"])
    unowned = stage(_unowned_intervals(rows, typed))
    moves = _target_moves(rows, members)
    rebalances = stage(_rebalances(bumps, conv, moves, unowned))
    return ConsumerFrames(
        rows=rows,
        members=members,
        rebalances=rebalances,
        unowned=unowned,
        removals=_removals(members),
        restarts=_static_restarts(members),
    )
