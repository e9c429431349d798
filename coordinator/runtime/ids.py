"""Random identifiers, in Kafka's formats (the core's ``IdSource``)."""

from __future__ import annotations

import base64
import os
import uuid

import ulid

_ZERO = bytes(16)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


class RandomIds:
    """Member ids like Kafka's ``Uuid.randomUuid().toString()`` (base64url of 16 random bytes,
    22 chars), group uids ``cgp_<ULID>``, topic ids from uuid4 (never the all-zero id)."""

    def new_member_id(self) -> str:
        raw = os.urandom(16)
        while raw == _ZERO:  # pragma: no cover - 2^-128
            raw = os.urandom(16)
        return _b64(raw)

    def new_uuid(self) -> str:
        return str(uuid.uuid4())

    def new_group_uid(self) -> str:
        return "cgp_" + str(ulid.ULID())

    def new_topic_id(self) -> str:
        raw = uuid.uuid4().bytes
        while raw == _ZERO:  # pragma: no cover
            raw = uuid.uuid4().bytes
        return _b64(raw)
