"""``kip848 users add|alter|delete|list``: SCRAM users of a running coordinator (Kafka's
``kafka-configs.sh --alter --add-config SCRAM-SHA-512=[...] --entity-type users``;
docs/security.md "Credentials").

The password is read from a prompt (asked twice), from ``--password-stdin`` or from
``--password-file FILE`` (its first line) — never from a flag, which would show in ``ps`` and
in the shell's history. It never leaves this machine: the command salts it (a random salt,
PBKDF2 with ``--iterations``) and sends the salted password, from which the coordinator keeps
Kafka's StoredKey and ServerKey (AlterUserScramCredentials).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from coordinator.cli.argtypes import int_in
from coordinator.cli.errors import UsageError
from coordinator.cli.output import print_json, print_table
from coordinator.cli.registry import Commands
from coordinator.cli.report import error_text, failed, print_hints
from coordinator.cli.rpc import add_client_flags, call, channel

SALT_BYTES = 32
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def register(commands: Commands) -> None:
    p = commands.add("users", cmd_users, help="SCRAM users (credentials kept salted, as Kafka's)")
    sub = p.add_subparsers(dest="users_command", metavar="ACTION", required=True)
    for name, text in (
        ("add", "give a user a SCRAM credential (refused if it has one for the mechanism)"),
        ("alter", "change a user's password (the user must have a credential already)"),
    ):
        a = sub.add_parser(name, help=text)
        a.add_argument("name")
        _mechanism_flag(a, "default SCRAM-SHA-512")
        a.add_argument(
            "--iterations",
            type=int_in(4096, 16384),
            default=4096,
            help="PBKDF2 iterations, 4096..16384 (default 4096)",
        )
        source = a.add_mutually_exclusive_group()
        source.add_argument(
            "--password-stdin", action="store_true", help="read the password from stdin"
        )
        source.add_argument(
            "--password-file", metavar="FILE", help="read the password from FILE's first line"
        )
        add_client_flags(a)
    d = sub.add_parser("delete", help="delete a user's credentials")
    d.add_argument("name")
    _mechanism_flag(d, "default every mechanism the user has")
    add_client_flags(d)
    ls = sub.add_parser("list", help="users, their mechanisms and iterations (never a key)")
    ls.add_argument("names", nargs="*", metavar="NAME")
    add_client_flags(ls)


def _mechanism_flag(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument(
        "--mechanism",
        action="append",
        default=[],
        choices=MECHANISMS,
        help=f"repeatable; {default}",
    )


def read_password(args: argparse.Namespace) -> str:
    """The password, from stdin, a file or a prompt (typed twice); never empty."""
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif args.password_file:
        try:
            with open(args.password_file, encoding="utf-8") as fp:
                password = fp.readline().rstrip("\r\n")
        except OSError as exc:
            raise UsageError(
                f"--password-file {args.password_file}: {exc.strerror or exc}"
            ) from None
    else:
        import getpass

        if not sys.stdin.isatty():
            raise UsageError(
                "no terminal to ask the password on: use --password-stdin or --password-file"
            )
        try:
            password = getpass.getpass(f"Password for {args.name}: ")
            again = getpass.getpass("Again: ")
        except EOFError:  # Ctrl-D at the prompt: end its line, then say why
            print(file=sys.stderr)
            raise UsageError("no password given (end of input at the prompt)") from None
        if again != password:
            raise UsageError("the two passwords differ")
    if not password:
        raise UsageError("the password must not be empty")
    return password


def cmd_users(args: argparse.Namespace) -> int:
    from kip848.v1 import admin_pb2, admin_pb2_grpc

    with channel(args) as ch:
        stub = admin_pb2_grpc.AdminServiceStub(ch)
        if args.users_command == "list":
            return _list(args, stub, admin_pb2)
        if args.users_command == "delete":
            return _delete(args, stub, admin_pb2)
        return _upsert(args, stub, admin_pb2)


def _described(args: argparse.Namespace, stub: Any, pb: Any, names: list[str]) -> Any:
    req = pb.DescribeUserScramCredentialsRequest()
    if names:
        req.users.names.extend(names)
    return call(stub.DescribeUserScramCredentials, req, args)


def _mechanisms_of(resp: Any, name: str) -> set[str]:
    from coordinator.security.scram import ScramMechanism

    return {
        ScramMechanism(c.mechanism).mechanism_name
        for r in resp.results
        if r.user == name and not r.error_code
        for c in r.credential_infos
    }


def _upsert(args: argparse.Namespace, stub: Any, pb: Any) -> int:
    import secrets

    from coordinator.security import scram

    if not args.name:
        raise UsageError("the user name must not be empty")
    mechanisms = list(dict.fromkeys(args.mechanism or ["SCRAM-SHA-512"]))
    current = _described(args, stub, pb, [args.name])
    if current.error_code:
        return failed(current.error_code, current.error_message)
    has = _mechanisms_of(current, args.name)
    for m in mechanisms:
        if args.users_command == "add" and m in has:
            raise UsageError(f"user {args.name} has a {m} credential already: use `users alter`")
        if args.users_command == "alter" and m not in has:
            raise UsageError(f"user {args.name} has no {m} credential: use `users add`")
    password = read_password(args)
    req = pb.AlterUserScramCredentialsRequest()
    if len(mechanisms) > 1:  # Kafka: one alteration per user and request
        reqs = []
        for m in mechanisms:
            one = pb.AlterUserScramCredentialsRequest()
            _add_upsertion(one, args, m, password, secrets.token_bytes(SALT_BYTES), scram)
            reqs.append(one)
    else:
        _add_upsertion(req, args, mechanisms[0], password, secrets.token_bytes(SALT_BYTES), scram)
        reqs = [req]
    return _altered(args, stub, reqs, lambda m: f"User {args.name}: {m} set.", mechanisms)


def _add_upsertion(
    req: Any, args: argparse.Namespace, mechanism: str, password: str, salt: bytes, scram: Any
) -> None:
    mech = scram.ScramMechanism.of(mechanism)
    req.upsertions.add(
        name=args.name,
        mechanism=int(mech),
        iterations=args.iterations,
        salt=salt,
        salted_password=scram.salted_password(mech, password, salt, args.iterations),
    )


def _delete(args: argparse.Namespace, stub: Any, pb: Any) -> int:
    from coordinator.security.scram import ScramMechanism

    mechanisms = list(dict.fromkeys(args.mechanism))
    if not mechanisms:
        current = _described(args, stub, pb, [args.name])
        if current.error_code:
            return failed(current.error_code, current.error_message)
        mechanisms = sorted(_mechanisms_of(current, args.name))
        if not mechanisms:
            print(f"kip848: user {args.name} has no credential", file=sys.stderr)
            return 1
    reqs = []
    for m in mechanisms:
        req = pb.AlterUserScramCredentialsRequest()
        req.deletions.add(name=args.name, mechanism=int(ScramMechanism.of(m)))
        reqs.append(req)
    return _altered(args, stub, reqs, lambda m: f"User {args.name}: {m} deleted.", mechanisms)


def _altered(
    args: argparse.Namespace, stub: Any, reqs: list[Any], ok: Any, mechanisms: list[str]
) -> int:
    results = []
    codes = []
    for req, mechanism in zip(reqs, mechanisms, strict=True):
        resp = call(stub.AlterUserScramCredentials, req, args)
        if resp.error_code:
            return failed(resp.error_code, resp.error_message)
        for r in resp.results:
            codes.append(r.error_code)
            results.append(
                {
                    "user": r.user,
                    "mechanism": mechanism,
                    "error": error_text(r.error_code, r.error_message) if r.error_code else None,
                }
            )
    if args.output == "json":
        print_json(results)
    else:
        for r in results:
            if r["error"]:
                print(f"Error for {r['user']} ({r['mechanism']}): {r['error']}", file=sys.stderr)
            else:
                print(ok(r["mechanism"]))
    print_hints([c for c in codes if c])
    return 1 if any(r["error"] for r in results) else 0


def _list(args: argparse.Namespace, stub: Any, pb: Any) -> int:
    from coordinator.security.scram import ScramMechanism

    resp = _described(args, stub, pb, args.names)
    if resp.error_code:
        return failed(resp.error_code, resp.error_message)
    rows = [
        {
            "user": r.user,
            "mechanism": ScramMechanism(c.mechanism).mechanism_name,
            "iterations": c.iterations,
        }
        for r in resp.results
        if not r.error_code
        for c in r.credential_infos
    ]
    errors = [(r.user, r.error_code, r.error_message) for r in resp.results if r.error_code]
    if args.output == "json":
        print_json(rows)
    else:
        print_table(
            ("USER", "MECHANISM", "ITERATIONS"),
            [(r["user"], r["mechanism"], r["iterations"]) for r in rows],
        )
    for user, code, message in errors:
        print(f"Error for {user}: {error_text(code, message)}", file=sys.stderr)
    return 1 if errors else 0
