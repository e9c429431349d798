"""SASL/PLAIN's password check, off the event loop.

PLAIN's password is checked against the SCRAM credentials stored for the user: it is derived
as each was (PBKDF2 of the credential's hash, 4,096 to 16,384 iterations: 1-7 ms per stored
mechanism, both stored by default). On the event loop, which serves every group, a stream of
sign-in attempts — a known user's name and guessed passwords, on as many connections as a
client cares to open — would hold back every heartbeat behind it. The derivation runs on one of
:data:`CHECK_THREADS` threads instead (``hashlib.pbkdf2_hmac`` releases the GIL), while the
attempt's connection reads nothing more until it is decided, as Kafka's authenticator takes a
connection's SASL messages one at a time (``sasl.SaslSession.checking``). The credentials are
looked up on the loop, when the attempt is read."""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from coordinator.security import scram

__all__ = ["CHECK_THREADS", "CredentialLookup", "password_check", "run"]

log = logging.getLogger("kip848.kafka")

CHECK_THREADS = 2
"""Threads deriving passwords (the derivations of more attempts wait their turn there)."""

CredentialLookup = Callable[[str, scram.ScramMechanism], "scram.ScramCredential | None"]

_pool: ThreadPoolExecutor | None = None


def password_check(lookup: CredentialLookup, name: str, password: str) -> Callable[[], bool] | None:
    """What checks ``password`` against the SCRAM credentials of ``name`` (either mechanism
    matches), looked up now; None when ``name`` has none (refused at once: nothing to
    derive)."""
    stored = [
        (mechanism, credential)
        for mechanism in scram.ScramMechanism
        if (credential := lookup(name, mechanism)) is not None
    ]
    if not stored:
        return None

    def check() -> bool:
        matched = False
        for mechanism, credential in stored:  # every one: no early answer to time
            candidate = scram.credential_from_password(
                mechanism, password, credential.salt, credential.iterations
            )
            matched |= hmac.compare_digest(candidate.stored_key, credential.stored_key)
        return matched

    return check


def run(check: Callable[[], bool], done: Callable[[bool], None]) -> None:
    """Run ``check`` on a checking thread, then ``done`` with its outcome on the loop (a check
    that raises fails, logged)."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(CHECK_THREADS, thread_name_prefix="kip848-sasl")
    future = asyncio.get_running_loop().run_in_executor(_pool, check)

    def finished(f: asyncio.Future[bool]) -> None:
        if f.cancelled():  # the loop is shutting down
            return
        error = f.exception()
        if error is not None:
            log.error("A SASL/PLAIN password check failed", exc_info=error)
        done(error is None and f.result())

    future.add_done_callback(finished)
