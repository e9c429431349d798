"""SASL/SCRAM sign-ins while a node applies an append of credentials in parts
(``Partitions._apply_in_parts``, the committed copy's credentials staged): at every loop step
every user signs in with the passwords as before the append, or every user with those after
it, never a mix; an exchange begun before the append is shown and finished after completes
with the credential it began with (the server reads it once, at the client's first message,
as Kafka's ScramSaslServer). On the memory store the HA tests share and on PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import scramp
import test_cluster_log_reload
from cluster_log_steps import start_catch_up
from test_cluster_log_reload import Node, node, upsert
from test_server_authorization import ADMIN

from coordinator.runtime import partitions as partitions_module
from coordinator.security import scram
from coordinator.server.api import AlterScramCredentials
from coordinator.server.kafka.sasl import SaslFailure, ScramServer

STEP = 3
USERS = [f"u{i}" for i in range(7)]
SHA256 = scram.ScramMechanism.SCRAM_SHA_256
NOW = 0
open_store = test_cluster_log_reload.open_store  # the fixture: memory and PostgreSQL


async def set_passwords(writer: Node, password: str) -> None:
    """One append: every user's SCRAM-SHA-256 credential for ``password``."""
    upserts = tuple(upsert(u, SHA256, password) for u in USERS)
    await writer.ok(
        await writer.service.alter_user_scram_credentials(
            AlterScramCredentials(upsertions=upserts), ADMIN
        )
    )


class Exchange:
    """A SCRAM-SHA-256 sign-in of ``name`` with ``password`` against node ``n``, a message at a
    time."""

    def __init__(self, n: Node, name: str, password: str) -> None:
        self.client = scramp.ScramClient(["SCRAM-SHA-256"], name, password)
        self.server = ScramServer(SHA256, n.service.scram_credential)

    def first(self) -> bool:
        try:
            step = self.server.step(self.client.get_client_first().encode(), NOW)
        except SaslFailure:
            return False
        self.client.set_server_first(step.challenge.decode())
        return True

    def final(self) -> bool:
        try:
            step = self.server.step(self.client.get_client_final().encode(), NOW)
        except SaslFailure:
            return False
        assert step.done
        self.client.set_server_final(step.challenge.decode())  # the server's signature checked
        return True


def signs_in(n: Node, name: str, password: str) -> bool:
    exchange = Exchange(n, name, password)
    return exchange.first() and exchange.final()


async def test_sign_ins_during_an_append_of_credentials_in_parts_see_it_whole(
    open_store: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seven users' passwords changed from "old" to "new" in one append, applied by the
    follower in parts of three. At every loop step each user signs in with "old" and with
    "new": all with "old" (before the append is shown) or all with "new" (after), never some
    users with one and others with the other; and an exchange begun at each step (its first
    message) and finished at the next completes with the password of the step it began in.
    With the committed copy's credentials not staged, a step had u0-u2 on "new" and the
    others on "old"."""
    monkeypatch.setattr(partitions_module, "STEP_RECORDS", STEP, raising=False)
    async with node(open_store, 1) as writer, node(open_store, 2) as behind:
        await set_passwords(writer, "old")
        await behind.follow(writer)
        await set_passwords(writer, "new")
        seen: list[tuple[tuple[bool, bool], ...]] = []
        begun: list[tuple[Exchange, str]] = []
        straddling: list[tuple[str, str, bool]] = []  # begun with, shown when finished, ok
        catching_up = start_catch_up(behind, writer)
        i = 0
        while True:
            for exchange, password in begun:  # begun a step ago
                now = "new" if signs_in(behind, USERS[0], "new") else "old"
                straddling.append((password, now, exchange.final()))
            if catching_up.done():
                break
            state = tuple((signs_in(behind, u, "old"), signs_in(behind, u, "new")) for u in USERS)
            seen.append(state)
            shown = "new" if state[0] == (False, True) else "old"
            exchange = Exchange(behind, USERS[i % len(USERS)], shown)
            assert exchange.first()
            begun = [(exchange, shown)]
            i += 1
            await asyncio.sleep(0)
        before, after = ((True, False),) * len(USERS), ((False, True),) * len(USERS)
        assert set(seen) <= {before, after}
        assert seen[0] == before and before in seen and len(seen) > 6  # in parts, read between
        assert all(ok for _begun, _now, ok in straddling)
        assert ("old", "new", True) in straddling  # one begun before the swap, ended after
        assert all(signs_in(behind, u, "new") and not signs_in(behind, u, "old") for u in USERS)
