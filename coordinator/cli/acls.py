"""``kip848 acls add|remove|list``: Kafka's ACLs on a running coordinator, with kafka-acls.sh's
flags (docs/security.md "The ACL model").

``add`` creates one ACL per (principal, host, operation, resource): ``--allow-principal`` /
``--deny-principal`` (repeatable), ``--allow-host`` / ``--deny-host`` (default ``*``),
``--operation`` (repeatable; default ``All``), resources ``--group``, ``--topic``,
``--transactional-id`` (repeatable) and ``--cluster``, ``--resource-pattern-type literal |
prefixed``. ``remove`` deletes the ACLs the same flags select (no principal: every principal;
no operation: every operation). ``list`` shows the ACLs of the resources named (all without
one), optionally of one ``--principal``; ``--resource-pattern-type`` may also be ``any`` or
``match`` (every ACL that applies to the named resource: ``*`` and prefixes too).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from coordinator.cli.errors import UsageError
from coordinator.cli.output import print_json, print_table
from coordinator.cli.registry import Commands
from coordinator.cli.report import error_text, failed, print_hints
from coordinator.cli.rpc import add_client_flags, call, channel

CLUSTER_NAME = "kafka-cluster"


def register(commands: Commands) -> None:
    p = commands.add("acls", cmd_acls, help="Kafka's ACLs: who may do what (docs/security.md)")
    sub = p.add_subparsers(dest="acls_command", metavar="ACTION", required=True)
    for name, text in (
        ("add", "create ACLs (one per principal, host, operation and resource)"),
        ("remove", "delete the ACLs the flags select"),
        ("list", "show ACLs (of the resources named, or all)"),
    ):
        a = sub.add_parser(name, help=text)
        if name == "list":
            a.add_argument("--principal", help="only the ACLs of this principal (User:NAME)")
        else:
            a.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL")
            a.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
            a.add_argument("--allow-host", action="append", default=[], metavar="HOST")
            a.add_argument("--deny-host", action="append", default=[], metavar="HOST")
            a.add_argument(
                "--operation",
                action="append",
                default=[],
                metavar="OP",
                help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                "DescribeConfigs, AlterConfigs, IdempotentWrite, All (repeatable)",
            )
        a.add_argument("--group", action="append", default=[], metavar="GROUP")
        a.add_argument("--topic", action="append", default=[], metavar="TOPIC")
        a.add_argument("--transactional-id", action="append", default=[], metavar="ID")
        a.add_argument("--cluster", action="store_true", help="the cluster resource")
        a.add_argument(
            "--resource-pattern-type",
            default=None,
            choices=("literal", "prefixed", "any", "match")
            if name != "add"
            else ("literal", "prefixed"),
            help="how resource names match (default literal; list and remove: any)",
        )
        add_client_flags(a)


def _resources(args: argparse.Namespace) -> list[tuple[int, str]]:
    from coordinator.security.acls import ResourceType

    out = [(int(ResourceType.GROUP), g) for g in args.group]
    out += [(int(ResourceType.TOPIC), t) for t in args.topic]
    out += [(int(ResourceType.TRANSACTIONAL_ID), t) for t in args.transactional_id]
    if args.cluster:
        out.append((int(ResourceType.CLUSTER), CLUSTER_NAME))
    for _rtype, name in out:
        if not name:
            raise UsageError("a resource name must not be empty")
    return out


def _pattern(args: argparse.Namespace, default: str) -> int:
    from coordinator.security.acls import PatternType, parse_enum

    return int(parse_enum(PatternType, args.resource_pattern_type or default))


def _operations(args: argparse.Namespace, default: str) -> list[int]:
    from coordinator.security.acls import AclOperation, parse_enum

    try:
        ops = [parse_enum(AclOperation, o) for o in args.operation or [default]]
    except ValueError as exc:
        raise UsageError(f"--operation: {exc}") from None
    return [int(o) for o in dict.fromkeys(ops)]


def _entries(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """(principal, host, permission) for each --allow/--deny principal (and host)."""
    from coordinator.security.acls import AclPermissionType
    from coordinator.security.principal import KafkaPrincipal, PrincipalFormatError

    out = []
    for flag, principals, hosts, permission in (
        ("--allow-principal", args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
        ("--deny-principal", args.deny_principal, args.deny_host, AclPermissionType.DENY),
    ):
        for principal in principals:
            try:
                KafkaPrincipal.parse(principal)
            except PrincipalFormatError as exc:
                raise UsageError(f"{flag}: {exc}") from None
            for host in hosts or ["*"]:
                out.append((principal, host, int(permission)))
        if hosts and not principals:
            raise UsageError(f"{flag.replace('principal', 'host')} needs {flag}")
    return out


def cmd_acls(args: argparse.Namespace) -> int:
    from kip848.v1 import admin_pb2, admin_pb2_grpc

    resources = _resources(args)
    with channel(args) as ch:
        stub = admin_pb2_grpc.AdminServiceStub(ch)
        if args.acls_command == "add":
            return _add(args, stub, admin_pb2, resources)
        if args.acls_command == "remove":
            return _remove(args, stub, admin_pb2, resources)
        return _list(args, stub, admin_pb2, resources)


def _add(args: argparse.Namespace, stub: Any, pb: Any, resources: list[tuple[int, str]]) -> int:
    entries = _entries(args)
    if not resources or not entries:
        raise UsageError(
            "acls add needs a resource (--group, --topic, --transactional-id or --cluster) and "
            "--allow-principal or --deny-principal"
        )
    pattern = _pattern(args, "literal")
    creations = [
        _binding(pb, rtype, name, pattern, principal, host, op, permission)
        for rtype, name in resources
        for principal, host, permission in entries
        for op in _operations(args, "All")
    ]
    resp = call(stub.CreateAcls, pb.CreateAclsRequest(creations=creations), args)
    if resp.error_code:
        return failed(resp.error_code, resp.error_message)
    results: list[dict[str, Any]] = [
        {
            "acl": _binding_json(c),
            "error": error_text(r.error_code, r.error_message) if r.error_code else None,
        }
        for c, r in zip(creations, resp.results, strict=False)
    ]
    if args.output == "json":
        print_json(results)
    else:
        for r in results:
            if r["error"]:
                print(f"Error for {_binding_text(r['acl'])}: {r['error']}", file=sys.stderr)
            else:
                print(f"Added {_binding_text(r['acl'])}.")
    print_hints([r.error_code for r in resp.results if r.error_code])
    return 1 if any(r["error"] for r in results) else 0


def _remove(args: argparse.Namespace, stub: Any, pb: Any, resources: list[tuple[int, str]]) -> int:
    entries = _entries(args)
    if not resources:
        raise UsageError(
            "acls remove needs a resource (--group, --topic, --transactional-id or --cluster)"
        )
    pattern = _pattern(args, "any")
    ops = _operations(args, "any")
    filters = []
    for rtype, name in resources:
        selected: list[tuple[str | None, str | None, int]] = [*entries] or [(None, None, 1)]
        for principal, host, permission in selected:
            for op in ops:
                f = pb.AclFilter(
                    resource_type_filter=rtype,
                    resource_name_filter=name,
                    pattern_type_filter=pattern,
                    operation=op,
                    permission_type=permission,
                )
                if principal is not None:
                    f.principal_filter = principal
                    if host is not None and (args.allow_host or args.deny_host):
                        f.host_filter = host  # else: from any host
                filters.append(f)
    resp = call(stub.DeleteAcls, pb.DeleteAclsRequest(filters=filters), args)
    if resp.error_code:
        return failed(resp.error_code, resp.error_message)
    removed = [_binding_json(b) for r in resp.filter_results for b in r.matching_acls]
    errors = [
        error_text(r.error_code, r.error_message) for r in resp.filter_results if r.error_code
    ]
    if args.output == "json":
        print_json({"removed": removed, "errors": errors})
    else:
        for b in removed:
            print(f"Removed {_binding_text(b)}.")
        if not removed and not errors:
            print("No ACL matched.")
        for e in errors:
            print(f"Error: {e}", file=sys.stderr)
    return 1 if errors else 0


def _list(args: argparse.Namespace, stub: Any, pb: Any, resources: list[tuple[int, str]]) -> int:
    pattern = _pattern(args, "any")
    filters = [
        pb.AclFilter(
            resource_type_filter=rtype,
            resource_name_filter=name,
            pattern_type_filter=pattern,
            operation=1,
            permission_type=1,
        )
        for rtype, name in resources
    ] or [
        pb.AclFilter(
            resource_type_filter=1, pattern_type_filter=pattern, operation=1, permission_type=1
        )
    ]
    rows = []
    for f in filters:
        if args.principal:
            f.principal_filter = args.principal
        resp = call(stub.DescribeAcls, pb.DescribeAclsRequest(filter=f), args)
        if resp.error_code:
            return failed(resp.error_code, resp.error_message)
        for res in resp.resources:
            for a in res.acls:
                binding = _binding(
                    pb,
                    res.resource_type,
                    res.resource_name,
                    res.pattern_type,
                    a.principal,
                    a.host,
                    a.operation,
                    a.permission_type,
                )
                rows.append(_binding_json(binding))
    rows = list({tuple(sorted(r.items())): r for r in rows}.values())  # a filter per resource
    if args.output == "json":
        print_json(rows)
    else:
        print_table(
            ("RESOURCE TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"),
            [
                (
                    r["resource_type"],
                    r["resource_name"],
                    r["pattern_type"],
                    r["principal"],
                    r["host"],
                    r["operation"],
                    r["permission_type"],
                )
                for r in rows
            ],
        )
    return 0


def _binding(pb: Any, *fields: Any) -> Any:
    """An ``AclBinding`` message of (resource type, name, pattern type, principal, host,
    operation, permission type)."""
    names = (
        "resource_type",
        "resource_name",
        "pattern_type",
        "principal",
        "host",
        "operation",
        "permission_type",
    )
    return pb.AclBinding(**dict(zip(names, fields, strict=True)))


def _binding_json(b: Any) -> dict[str, str]:
    from coordinator.security.acls import (
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourceType,
    )

    return {
        "resource_type": ResourceType(b.resource_type).name,
        "resource_name": b.resource_name,
        "pattern_type": PatternType(b.pattern_type).name,
        "principal": b.principal,
        "host": b.host,
        "operation": AclOperation(b.operation).name,
        "permission_type": AclPermissionType(b.permission_type).name,
    }


def _binding_text(b: dict[str, str]) -> str:
    return (
        f"{b['permission_type']} {b['principal']} {b['operation']} from {b['host']} on "
        f"{b['resource_type']}:{b['pattern_type']}:{b['resource_name']}"
    )
