"""``kip848 configs describe|alter``: dynamic group configs (``consumer.session.timeout.ms``,
``consumer.heartbeat.interval.ms``), as Kafka's ``kafka-configs.sh --entity-type groups``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from coordinator.cli.errors import UsageError
from coordinator.cli.group_client import GroupClient
from coordinator.cli.output import print_json, print_table, split_values
from coordinator.cli.registry import Commands
from coordinator.cli.report import error_text, report
from coordinator.cli.rpc import add_client_flags, channel


def register(commands: Commands) -> None:
    p = commands.add(
        "configs",
        cmd_configs,
        help="dynamic group configs (consumer.session.timeout.ms, consumer.heartbeat.interval.ms)",
    )
    csub = p.add_subparsers(dest="configs_command", metavar="ACTION", required=True)
    g = csub.add_parser("describe", help="effective group configs and where they come from")
    g.add_argument("--group", required=True, metavar="GROUP")
    add_client_flags(g)
    g = csub.add_parser("alter", help="set or delete (revert to the server default) group configs")
    g.add_argument("--group", required=True, metavar="GROUP")
    g.add_argument("--add-config", action="append", default=[], metavar="NAME=VALUE[,NAME=VALUE]")
    g.add_argument("--delete-config", action="append", default=[], metavar="NAME[,NAME]")
    g.add_argument("--validate-only", action="store_true", help="check, change nothing")
    add_client_flags(g)


def _parse_config_pairs(values: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in split_values(values):
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise UsageError(f"--add-config expects NAME=VALUE[,NAME=VALUE...], got {item!r}")
        out[name.strip()] = value.strip()
    return out


def cmd_configs(args: argparse.Namespace) -> int:
    """Among several nodes (docs/ha.md) a group's configs are asked of, and changed at, the
    node leading its coordinator partition (``GroupClient.call_group``)."""
    with channel(args) as ch:
        client = GroupClient(args, ch)
        try:
            return _configs(args, client)
        finally:
            client.close()


def _configs(args: argparse.Namespace, client: GroupClient) -> int:
    from kip848.v1 import admin_pb2

    group_resource = 16
    if args.configs_command == "describe":
        Desc = admin_pb2.DescribeConfigsRequest
        resp = client.call_group(
            args.group,
            lambda c: c.admin.DescribeConfigs,
            Desc(
                resources=[Desc.Resource(resource_type=group_resource, resource_name=args.group)],
                include_documentation=True,
            ),
        )
        code, message = resp.error_code, resp.error_message
        if not code and resp.results[0].error_code:
            code, message = resp.results[0].error_code, resp.results[0].error_message
        if code:
            report(f"describe configs of group {args.group}", code, message)
            return 1
        sources = {8: "group override", 5: "server default"}
        rows = [
            {
                "name": cfg.name,
                "value": cfg.value,
                "source": sources.get(cfg.config_source, str(cfg.config_source)),
                "documentation": cfg.documentation,
            }
            for cfg in resp.results[0].configs
        ]
        if args.output == "json":
            print_json({"group_id": args.group, "configs": rows})
        else:
            print_table(
                ("NAME", "VALUE", "SOURCE"),
                [(r["name"], r["value"], r["source"]) for r in rows],
            )
        return 0
    sets = _parse_config_pairs(args.add_config)
    deletes = split_values(args.delete_config)
    if not sets and not deletes:
        raise UsageError("configs alter: give --add-config NAME=VALUE and/or --delete-config NAME")
    both = sorted(set(sets) & set(deletes))
    if both:
        raise UsageError(f"configs alter: {', '.join(both)} both added and deleted")
    Alter = admin_pb2.IncrementalAlterConfigsRequest
    configs = [Alter.AlterableConfig(name=n, config_operation=0, value=v) for n, v in sets.items()]
    configs += [Alter.AlterableConfig(name=n, config_operation=1) for n in deletes]
    resp = client.call_group(
        args.group,
        lambda c: c.admin.IncrementalAlterConfigs,
        Alter(
            resources=[
                Alter.Resource(
                    resource_type=group_resource, resource_name=args.group, configs=configs
                )
            ],
            validate_only=args.validate_only,
        ),
    )
    code, message = resp.error_code, resp.error_message
    if not code and resp.responses[0].error_code:
        code, message = resp.responses[0].error_code, resp.responses[0].error_message
    if args.output == "json":
        print_json(
            {
                "group_id": args.group,
                "set": sets,
                "deleted": deletes,
                "validate_only": args.validate_only,
                "error": error_text(code, message) if code else None,
            }
        )
    if code:
        report(f"alter configs of group {args.group}", code, message)
        return 1
    if args.output != "json":
        verb = "Validated (nothing changed)" if args.validate_only else "Altered"
        changes = [f"{n}={v}" for n, v in sets.items()] + [
            f"{n} (back to the server default)" for n in deletes
        ]
        print(
            f"{verb} configs of group {args.group}: {', '.join(changes)}. Members see the change on their next heartbeat."
        )
    return 0
