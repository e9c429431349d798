"""``kip848 cluster describe|move``: the coordinator nodes sharing a PostgreSQL store, read and
steered in PostgreSQL itself (docs/ha.md), as an operator with the store's URI does.

* ``describe``: the nodes (addresses, live or not, the controller, how far each has applied
  the cluster log, how many partitions are targeted at each: at a node not live, they wait
  for it to come back), and every coordinator partition: its leader and leader epoch, whether the
  leader serves it or still loads it, whom the controller targets it at, an operator's pin,
  how long its lease has left.
* ``move --partition N --to NODE``: the partition should be led by NODE (a live node), and
  stays there while NODE lives (the balancer leaves it). The current leader hands it over
  gracefully (unloads, then releases); NODE takes and loads it at once (the nodes are
  notified).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from coordinator.cli.argtypes import INT32_MAX, int_in
from coordinator.cli.output import dash, print_json, print_table
from coordinator.cli.registry import Commands


def register(commands: Commands) -> None:
    p = commands.add(
        "cluster", cmd_cluster, help="the coordinator nodes of a PostgreSQL store (describe, move)"
    )
    sub = p.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    d = sub.add_parser("describe", help="nodes, partition leaders and their load state")
    m = sub.add_parser("move", help="move a coordinator partition to a node (and pin it there)")
    for q in (d, m):
        q.add_argument(
            "--store",
            required=True,
            metavar="URI",
            help="the PostgreSQL store the nodes share (postgresql://user:password@host/db)",
        )
        q.add_argument("--output", choices=("table", "json"), default="table")
    m.add_argument("--partition", type=int_in(0, 1023), required=True, metavar="N")
    m.add_argument("--to", type=int_in(0, INT32_MAX), required=True, metavar="NODE")


def cmd_cluster(args: argparse.Namespace) -> int:
    from coordinator.runtime.store import StoreError
    from coordinator.runtime.store.postgres import is_postgres_dsn
    from coordinator.runtime.store.postgres_leases import PostgresLeases
    from coordinator.runtime.store.postgres_schema import dsn_for_log

    if not is_postgres_dsn(args.store):
        print(
            "kip848 cluster: --store must be a postgresql:// URI (nodes share a PostgreSQL store)",
            file=sys.stderr,
        )
        return 2
    where = dsn_for_log(args.store)
    leases = PostgresLeases(args.store, where=where)
    try:
        leases.check_store()  # a store this build does not understand is neither read nor moved
        if args.cluster_command == "move":
            leases.move(args.partition, args.to)
            if args.output == "json":
                print_json({"partition": args.partition, "target": args.to, "pinned": True})
            else:
                print(f"Partition {args.partition} moves to node {args.to} (pinned there).")
            return 0
        described = describe(leases.state())
    except StoreError as exc:
        print(f"kip848 cluster: {exc}", file=sys.stderr)
        return 1
    finally:
        leases.close()
    if args.output == "json":
        print_json(described)
        return 0
    print(
        f"Controller: {dash(described['controller'])} (epoch {described['controller_epoch']}); "
        f"cluster log ends at offset {described['cluster_log_end']}."
    )
    waiting = [n for n in described["nodes"] if not n["live"] and n["targeted"]]
    if waiting:
        print(
            "Partitions waiting for nodes not running: "
            + ", ".join(f"node {n['node_id']} ({n['targeted']})" for n in waiting)
            + "."
        )
    print()
    print_table(
        [
            "NODE",
            "ADDRESS",
            "KAFKA",
            "LIVE",
            "EXPIRES-MS",
            "PARTITIONS",
            "CLUSTER-LOG-LAG",
            "TARGETED",
        ],
        [
            [
                n["node_id"],
                n["address"],
                dash(n["kafka_address"]),
                "yes" if n["live"] else "no",
                n["expires_in_ms"],
                n["partitions"],
                n["cluster_log_lag"],
                n["targeted"],
            ]
            for n in described["nodes"]
        ],
    )
    print()
    print_table(
        ["PARTITION", "LEADER", "EPOCH", "STATE", "TARGET", "PINNED", "EXPIRES-MS"],
        [
            [
                p["partition"],
                dash(p["leader"]),
                p["leader_epoch"],
                p["state"],
                dash(p["target"]),
                "yes" if p["pinned"] else "no",
                dash(p["expires_in_ms"]),
            ]
            for p in described["partitions"]
        ],
    )
    return 0


def describe(state: Any) -> dict[str, Any]:
    """The cluster as ``describe`` shows it (its JSON). A partition is ``serving`` when its
    live leader finished loading it at the current epoch, ``loading`` before that, ``unled``
    when no live node holds its lease. A node's ``targeted``: the partitions the controller
    targets at it (at a node not live: waiting for it to come back, as when a cluster
    starts again, until the controller gives it up)."""
    live = set(state.live())
    partitions = []
    led: dict[int, int] = {}
    targeted: dict[int, int] = {}
    for lease in state.leases:
        if lease.target is not None:
            targeted[lease.target] = targeted.get(lease.target, 0) + 1
        held = lease.held and lease.leader in live
        if held:
            led[lease.leader] = led.get(lease.leader, 0) + 1
        partitions.append(
            {
                "partition": lease.partition,
                "leader": lease.leader if held else None,
                "leader_epoch": lease.epoch,
                "state": "unled"
                if not held
                else "serving"
                if lease.loaded_epoch == lease.epoch
                else "loading",
                "target": lease.target,
                "pinned": lease.pinned,
                "expires_in_ms": lease.expires_in_ms if held else None,
            }
        )
    end = state.cluster_log_end
    nodes = [
        {
            "node_id": n,
            "address": row.address,
            "kafka_address": row.kafka_address,
            "live": row.live,
            "expires_in_ms": row.expires_in_ms,
            "partitions": led.get(n, 0),
            "cluster_log_offset": row.cluster_offset,
            "cluster_log_lag": max(0, end - row.cluster_offset),
            "controller": state.controller == n,
            "targeted": targeted.get(n, 0),
        }
        for n, row in sorted(state.nodes.items())
    ]
    return {
        "controller": state.controller,
        "controller_epoch": state.controller_epoch,
        "cluster_log_end": end,
        "nodes": nodes,
        "partitions": partitions,
    }
