"""The committed copy's ACLs and SCRAM credentials staged while an append of the cluster log is
applied in parts (``SecurityMetadata.stage``/``unstage``, the ACLs' index forked:
``AclIndexer.fork``): random ACL and credential records replayed, stages and unstages, the
authorizer asked and indexes pinned in between. Every read sees the ACLs as of the last
unstage (or before the stage), the authorizer decides over exactly their index, an index
handed out never changes, and no index is built whole again after the first."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_security_authorizer_index import BINDINGS, QUESTIONS, contents

from coordinator.core import records as r
from coordinator.core.commands import SequentialIds
from coordinator.factory import new_cluster
from coordinator.security import acl_index
from coordinator.security.acl_index import AclIndex
from coordinator.security.authorizer import Authorizer, _decide
from coordinator.security.scram import ScramMechanism

USERS = ["alice", "bob", "carol"]


def credential(user: str, n: int) -> r.Record:
    value = r.UserScramCredentialValue(
        salt=b"s%d" % n, stored_key=b"k%d" % n, server_key=b"v%d" % n, iterations=4096 + n
    )
    return r.scram_credential_record(user, int(ScramMechanism.SCRAM_SHA_256), value)


ACL = st.tuples(st.just("acl"), st.booleans(), st.sampled_from(BINDINGS))
OPS = st.one_of(
    ACL,
    ACL,
    st.tuples(st.just("credential"), st.sampled_from(USERS), st.integers(-1, 3)),
    st.tuples(st.sampled_from(["stage", "unstage", "stage", "unstage"])),
    st.tuples(st.sampled_from(["read", "pin", "new authorizer"])),
)


ADD_A, ADD_B = ("acl", True, BINDINGS[0]), ("acl", True, BINDINGS[1])


@settings(max_examples=100, deadline=None)
@given(st.lists(OPS, min_size=1, max_size=40))
# A change not asked for yet when staged: the staged index must start from it.
@example([ADD_A, ("stage",), ADD_B, ("unstage",), ("read",)])
# A reader new while staged: the index of the ACLs shown, kept apart from the staged one's.
@example([ADD_A, ("read",), ("stage",), ADD_B, ("new authorizer",), ("unstage",), ("read",)])
def test_staged_acls_and_credentials_are_read_as_of_the_stage_until_unstaged(
    ops: list[tuple[Any, ...]],
) -> None:
    """Modelled: the ACLs and credentials every read sees (as of the stage while staged) and
    those replayed. Reads (after an unstage, a pin, a new authorizer, or a read as such): the
    ACLs listed, the authorizer's decisions and its index, SCRAM credentials; pinned indexes
    checked again at the end. Checked to fail with the staged copy sharing the shown one's
    indexer (a new reader while staged built the index whole), with a fork that left out the
    changes not published yet (an index without them), with an index's lists changed in
    place (a pinned index changed), and with an unstage that kept the old indexer."""
    registry, sec = new_cluster(SequentialIds())
    registry.undo.enabled = False  # the committed copy: durable records only, never rolled back
    az = Authorizer(sec)
    az.authorize(*QUESTIONS[0])  # the index built whole, once (the loader thread's, at a load)
    builds: list[int] = []
    build = acl_index.AclIndexer.__init__

    def counted(self: Any, *args: Any) -> None:
        builds.append(1)
        build(self, *args)

    acl_index.AclIndexer.__init__ = counted  # type: ignore[method-assign]
    try:
        acls: set[Any] = set()  # replayed
        creds: dict[str, int] = {}
        shown_acls: set[Any] = set()  # what reads see
        shown_creds: dict[str, int] = {}
        staged = False
        pins: list[tuple[Any, tuple[list[str], list[str]], AclIndex]] = []
        for op in ops:
            kind = op[0]
            if kind == "acl":
                _, add, binding = op
                registry.replay(r.acl_record(binding.key(), add))
                (acls.add if add else acls.discard)(binding)
            elif kind == "credential":
                _, who, n = op
                if n < 0:
                    registry.replay(
                        r.scram_credential_record(who, int(ScramMechanism.SCRAM_SHA_256), None)
                    )
                    creds.pop(who, None)
                else:
                    registry.replay(credential(who, n))
                    creds[who] = n
            elif kind == "stage":
                sec.stage()
                staged = True
            elif kind == "unstage":
                sec.unstage()
                staged = False
            elif kind == "new authorizer":  # another reader (a listener's) from now on
                az = Authorizer(sec, az.config)
            elif kind == "pin":
                pinned = az.pinned()  # a partial over the index (no ACLs: everyone allowed)
                index = getattr(pinned, "args", (None,))[0]
                if index is not None:
                    pins.append((pinned, contents(index), index))
            if not staged:
                shown_acls, shown_creds = set(acls), dict(creds)
            if kind in ("acl", "credential", "stage"):
                continue  # no read in between: replayed records not asked for yet
            assert set(sec.acls()) == shown_acls
            whole = AclIndex(shown_acls)
            for q in QUESTIONS[::5]:
                assert az.authorize(*q) == _decide(whole, az.config, *q), q
            assert contents(az._index) == contents(whole)
            for who in USERS:
                cred = sec.scram_credential(who, ScramMechanism.SCRAM_SHA_256)
                n = shown_creds.get(who)
                assert (cred is None) == (n is None)
                assert cred is None or cred.iterations == 4096 + n  # type: ignore[operator]
        for _pinned, seen, index in pins:  # a handed-out index never changes
            assert contents(index) == seen
        assert builds == []  # never built whole again
    finally:
        acl_index.AclIndexer.__init__ = build  # type: ignore[method-assign]
