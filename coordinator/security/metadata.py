"""The security metadata: ACLs and SCRAM credentials, as records (Kafka's AclControlManager and
ScramControlManager, which keep them in the controller's metadata log).

A component of the cluster-level state machine (the topic registry's: both are cluster-wide
and Kafka keeps both in its metadata log): it shares that machine's undo log, so a failed
write rolls its changes back with the rest, and the registry routes its two record types to
it (:meth:`replayers`). Loading replays the same records through the same code.

Handlers validate first (Kafka's per-entry error codes), then emit records (replayed at once)
and return the response; reads return values. :attr:`acl_generation` changes with every ACL
replay and is never reused (a rollback restores an older number together with the ACLs it
numbered), so a cache of decisions keyed on it is never stale (``authorizer.py``).
:meth:`acl_index` gives the ACLs' index the authorizer decides over: built whole the first
time (where the ACLs were loaded: the loader thread), then kept in step as ACL records are
replayed (``acl_index.py``), never every ACL indexed again on the loop — but after a rollback
(the committed copy the authorizer reads never rolls back).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.core import records as r
from coordinator.core.commands import Result
from coordinator.core.errors import (
    CoordinatorError,
    DuplicateResourceError,
    ErrorCode,
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from coordinator.core.staging import Staging
from coordinator.core.timeline import TDict, UndoLog

from .acl_index import AclIndex, AclIndexer
from .acls import AclBinding, AclBindingFilter
from .scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    credential_from_salted_password,
)

_GENERATION = "acl_generation"


@dataclass(frozen=True, slots=True, kw_only=True)
class ScramDeletion:
    name: str
    mechanism: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ScramUpsertion:
    """A new credential as AlterUserScramCredentials carries it: the client salted the password
    (never sent); the keys are derived here."""

    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes

    def __repr__(self) -> str:
        return (
            f"ScramUpsertion(name={self.name!r}, mechanism={self.mechanism}, "
            f"iterations={self.iterations}, <salted password hidden>)"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class UserResult:
    """One user's answer (AlterUserScramCredentials, DescribeUserScramCredentials)."""

    user: str
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    credentials: tuple[tuple[ScramMechanism, int], ...] = ()
    """Describe: (mechanism, iterations) of each credential the user has (never the keys)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AclCreation:
    """One CreateAcls entry: a binding, or the error its validation gave."""

    binding: AclBinding | None
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AclDeletion:
    """One DeleteAcls filter's answer: the ACLs it deleted, or its error."""

    deleted: tuple[AclBinding, ...] = ()
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass(slots=True, kw_only=True)
class _Tables:
    """What the records change, staged as one (:meth:`SecurityMetadata.stage`)."""

    acls: TDict  # AccessControlEntryKey -> AclBinding
    credentials: TDict  # (user, ScramMechanism) -> ScramCredential
    meta: TDict  # _GENERATION -> int
    indexer: AclIndexer | None = None
    """The ACLs' index (:meth:`SecurityMetadata.acl_index`; None until first asked for). Not
    undone: a rollback leaves it at a generation the ACLs no longer have, and it is built again."""

    def copy(self, undo: UndoLog) -> _Tables:
        """The maps copied (C-level, on the same undo log), the ACLs' index forked."""
        new_dict = undo.new_dict
        return _Tables(
            acls=new_dict(self.acls),
            credentials=new_dict(self.credentials),
            meta=new_dict(self.meta),
            indexer=None if self.indexer is None else self.indexer.fork(),
        )

    def pieces(self) -> list[object]:
        """What to drop one at a time (the maps of 100,000 ACLs freed in one go are a
        millisecond or more of the loop)."""
        return [self.acls, self.credentials, self.meta, self.indexer]


class SecurityMetadata:
    """ACLs and SCRAM credentials (see the module doc)."""

    def __init__(self, undo: UndoLog) -> None:
        self.undo = undo
        self._tables = _Tables(
            acls=undo.new_dict(), credentials=undo.new_dict(), meta=undo.new_dict()
        )
        self._generations = itertools.count(1)  # never rolled back: numbers are not reused
        self._staging: Staging[_Tables] = Staging(lambda tables: tables.copy(undo))

    # ------------------------------------------------------------ records

    def replayers(self) -> dict[r.RecordType, Callable[[r.Record], None]]:
        return {
            r.RecordType.ACCESS_CONTROL_ENTRY: self._replay_acl,
            r.RecordType.USER_SCRAM_CREDENTIAL: self._replay_credential,
        }

    def _replay_acl(self, record: r.Record) -> None:
        tables = self._staging.target(self._tables)
        acls, meta = tables.acls, tables.meta
        key, value = r.typed(record, r.AccessControlEntryKey, r.AccessControlEntryValue)
        change: tuple[AclBinding, bool] | None = None  # added (True) or removed (False)
        if value is None:
            old = acls.get(key)
            if old is not None:
                acls.discard(key)
                change = (old, False)
        elif key not in acls:
            binding = AclBinding.of_key(key)
            acls[key] = binding
            change = (binding, True)
        previous: int = meta.get(_GENERATION, 0)
        generation = next(self._generations)
        meta[_GENERATION] = generation
        indexer = tables.indexer
        if indexer is not None:
            if indexer.generation != previous:  # rolled back under it: built again if asked
                tables.indexer = None
            elif change is not None:
                indexer.change(*change, generation)
            else:
                indexer.generation = generation

    def _replay_credential(self, record: r.Record) -> None:
        credentials = self._staging.target(self._tables).credentials
        key, value = r.typed(record, r.UserScramCredentialKey, r.UserScramCredentialValue)
        slot = (key.name, ScramMechanism(key.mechanism))
        if value is None:
            credentials.discard(slot)
        else:
            credentials[slot] = ScramCredential(
                salt=value.salt,
                stored_key=value.stored_key,
                server_key=value.server_key,
                iterations=value.iterations,
            )

    def stage(self) -> None:
        """From now on until :meth:`unstage`, replayed records go to a copy of the ACLs and
        credentials (their maps copied, C-level; the ACLs' index forked: ``staging.py``):
        every read sees them as they were. Only on a copy that is never rolled back (the
        committed one: its undo log is off)."""
        if self.undo.enabled:
            raise RuntimeError("staging needs a copy that is never rolled back")
        self._staging.stage(self._tables)

    def unstage(self) -> list[object]:
        """What was replayed since :meth:`stage` becomes what every read sees, at once.
        Returns what it replaced, a map at a time (:meth:`_Tables.pieces`), for the caller
        to drop when it will."""
        self._tables, replaced = self._staging.unstage(self._tables)
        return [piece for tables in replaced for piece in tables.pieces()]

    def snapshot(self) -> dict[str, object]:
        """Everything replay determines, canonical (tests compare it)."""
        return {
            "acls": sorted(str(b) for b in self._tables.acls.values()),
            "credentials": sorted(
                (
                    user,
                    int(mech),
                    c.iterations,
                    c.salt.hex(),
                    c.stored_key.hex(),
                    c.server_key.hex(),
                )
                for (user, mech), c in self._tables.credentials.items()
            ),
        }

    def records_of_state(self) -> list[r.Record]:
        out = [r.acl_record(key, True) for key in sorted(self._tables.acls, key=_acl_order)]
        for (user, mech), c in sorted(self._tables.credentials.items()):
            out.append(
                r.scram_credential_record(
                    user,
                    int(mech),
                    r.UserScramCredentialValue(
                        salt=c.salt,
                        stored_key=c.stored_key,
                        server_key=c.server_key,
                        iterations=c.iterations,
                    ),
                )
            )
        return out

    def _emit(self, result: Result[Any], record: r.Record) -> None:
        result.records.append(record)
        if record.key.TYPE is r.RecordType.ACCESS_CONTROL_ENTRY:
            self._replay_acl(record)
        else:
            self._replay_credential(record)

    # ------------------------------------------------------------ SCRAM credentials

    def scram_credential(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        """The stored credential of ``user`` for ``mechanism`` (None: none): what the SASL/SCRAM
        server checks a client's proof against."""
        found: ScramCredential | None = self._tables.credentials.get((user, mechanism))
        return found

    def users(self) -> list[str]:
        return sorted({user for user, _mech in self._tables.credentials})

    def describe_scram_credentials(self, users: Sequence[str] | None) -> list[UserResult]:
        """DescribeUserScramCredentials: every user with credentials (``users`` None or
        empty), else each named user — RESOURCE_NOT_FOUND for one without, DUPLICATE_RESOURCE
        for one named twice (Kafka's messages)."""
        if not users:
            return [self._described(user) for user in self.users()]
        out = []
        for user in dict.fromkeys(users):
            if users.count(user) > 1:
                exc: CoordinatorError = DuplicateResourceError(
                    f"Cannot describe SCRAM credentials for the same user twice in a single "
                    f"request: {user}"
                )
            elif not any(u == user for u, _m in self._tables.credentials):
                exc = ResourceNotFoundError(
                    f"Attempt to describe a user credential that does not exist: {user}"
                )
            else:
                out.append(self._described(user))
                continue
            out.append(UserResult(user=user, error_code=exc.code, error_message=exc.message))
        return out

    def _described(self, user: str) -> UserResult:
        return UserResult(
            user=user,
            credentials=tuple(
                (mech, c.iterations)
                for (u, mech), c in sorted(self._tables.credentials.items())
                if u == user
            ),
        )

    def alter_scram_credentials(
        self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> Result[list[UserResult]]:
        """AlterUserScramCredentials (Kafka's ScramControlManager.alterCredentials): at most one
        alteration per user in a request (a second is DUPLICATE_RESOURCE for that user, and
        none of its alterations is made); each is validated (empty name, unknown mechanism,
        iterations outside 4096..16384, deleting a credential that does not exist); the valid
        ones are made. One result per user, in the order the request names them."""
        order: list[str] = []
        errors: dict[str, CoordinatorError] = {}
        chosen: dict[str, ScramDeletion | ScramUpsertion] = {}
        items: list[ScramDeletion | ScramUpsertion] = [*deletions, *upsertions]
        for item in items:
            name = item.name
            if name not in order:
                order.append(name)
            if name in errors:
                continue
            if name in chosen:
                del chosen[name]
                errors[name] = DuplicateResourceError(
                    "A user credential cannot be altered twice in the same request"
                )
                continue
            try:
                self._check_alteration(item)
            except CoordinatorError as exc:
                errors[name] = exc
                continue
            chosen[name] = item
        result: Result[list[UserResult]] = Result(response=[])
        for name in order:
            change = chosen.get(name)
            if isinstance(change, ScramDeletion):
                self._emit(result, r.scram_credential_record(name, change.mechanism, None))
            elif isinstance(change, ScramUpsertion):
                cred = credential_from_salted_password(
                    ScramMechanism(change.mechanism),
                    change.salt,
                    change.salted_password,
                    change.iterations,
                )
                value = r.UserScramCredentialValue(
                    salt=cred.salt,
                    stored_key=cred.stored_key,
                    server_key=cred.server_key,
                    iterations=cred.iterations,
                )
                self._emit(result, r.scram_credential_record(name, change.mechanism, value))
            error = errors.get(name)
            assert result.response is not None
            result.response.append(
                UserResult(user=name)
                if error is None
                else UserResult(user=name, error_code=error.code, error_message=error.message)
            )
        return result

    def _check_alteration(self, item: ScramDeletion | ScramUpsertion) -> None:
        if not item.name:
            raise UnacceptableCredentialError("Username must not be empty")
        try:
            mechanism = ScramMechanism(item.mechanism)
        except ValueError:
            raise UnsupportedSaslMechanismError("Unknown SCRAM mechanism") from None
        if isinstance(item, ScramDeletion):
            if (item.name, mechanism) not in self._tables.credentials:
                raise ResourceNotFoundError(
                    "Attempt to delete a user credential that does not exist"
                )
            return
        if item.iterations < MIN_ITERATIONS:
            raise UnacceptableCredentialError("Too few iterations")
        if item.iterations > MAX_ITERATIONS:
            raise UnacceptableCredentialError("Too many iterations")
        if not item.salt or not item.salted_password:
            raise UnacceptableCredentialError("The salt and the salted password must not be empty")

    # ------------------------------------------------------------ ACLs

    @property
    def acl_generation(self) -> int:
        """Changes with every ACL change (and its rollback); 0 before any ACL was replayed."""
        generation: int = self._tables.meta.get(_GENERATION, 0)
        return generation

    def acl_index(self) -> AclIndex:
        """The index of the ACLs as they are now (``acl_index.py``), never changed afterwards:
        built whole from every ACL at the first call (the loader thread's, after the load:
        ``loader.load_cluster``) and after a rollback changed the ACLs; else the one kept as
        the ACL records were replayed since the last call."""
        tables = self._tables
        indexer = tables.indexer
        generation = self.acl_generation
        if indexer is None or indexer.generation != generation:
            indexer = tables.indexer = AclIndexer(tables.acls.values(), generation)
        return indexer.publish()

    def acls(self) -> Iterator[AclBinding]:
        return iter(self._tables.acls.values())

    def acl_count(self) -> int:
        return len(self._tables.acls)

    def describe_acls(self, flt: AclBindingFilter) -> list[AclBinding]:
        """DescribeAcls: the ACLs ``flt`` matches."""
        return [b for b in self._tables.acls.values() if flt.matches(b)]

    def create_acls(self, creations: Sequence[AclCreation]) -> Result[list[AclCreation]]:
        """CreateAcls: each valid binding is created (an ACL that exists already is left as it
        is: Kafka answers success without a record); invalid ones keep their error."""
        result: Result[list[AclCreation]] = Result(response=list(creations))
        for c in creations:
            if c.binding is None:
                continue
            key = c.binding.key()
            if key not in self._tables.acls:
                self._emit(result, r.acl_record(key, True))
        return result

    def delete_acls(self, filters: Sequence[AclBindingFilter]) -> Result[list[AclDeletion]]:
        """DeleteAcls: per filter, the ACLs it matches are deleted and listed (an ACL two
        filters match is listed by the first)."""
        result: Result[list[AclDeletion]] = Result(response=[])
        for flt in filters:
            matched = sorted(
                (key for key, b in self._tables.acls.items() if flt.matches(b)), key=_acl_order
            )
            deleted = tuple(self._tables.acls[key] for key in matched)
            for key in matched:
                self._emit(result, r.acl_record(key, False))
            assert result.response is not None
            result.response.append(AclDeletion(deleted=deleted))
        return result


def _acl_order(key: r.AccessControlEntryKey) -> tuple[Any, ...]:
    return (
        key.resource_type,
        key.resource_name,
        key.pattern_type,
        key.principal,
        key.host,
        key.operation,
        key.permission_type,
    )
