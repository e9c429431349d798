"""Connection limits of a listener, Kafka's (``max.connections.per.ip``,
``max.connections.per.ip.overrides``, ``max.connections``; docs/kafka.md, "Connection limits"):
so that one client, or many, cannot take every file descriptor of the process.

Each listener (the Kafka listeners together, as a broker's; the gRPC server) counts its open
connections, in all and per client IP address, from the moment one is accepted — before a TLS
handshake, before anything is read — until it is closed, however it ends: its client gone, a
failed TLS handshake or SASL exchange, an idle or handshake timeout, a refusal. A connection
that would pass a limit is closed at once, nothing read from it: its IP address's limit (the
override for that address, else ``max.connections.per.ip``) or, once the listener has
``max.connections`` open, any new one. Kafka's acceptor closes a connection past its IP's
limit the same way; past ``max.connections`` it stops accepting until one closes (the new
connections wait in the kernel's backlog): here those are closed too, so that the listener
keeps answering the clients it has and the others retry.

A refusal is logged (one line a second at most per listener, with the count of those left
unsaid) and counted (``on_refused``: the metrics, ``kip848_connections_refused_total``).
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("kip848.server")

UNLIMITED = 2**31 - 1
"""Kafka's default for each limit (``Int.MaxValue``): no limit."""
PER_IP = "max.connections.per.ip"
OVERRIDES = "max.connections.per.ip.overrides"
TOTAL = "max.connections"
NAMES = (PER_IP, OVERRIDES, TOTAL)
LOG_EVERY_S = 1.0
"""At most one line a second about refused connections, per listener."""
_HOST = re.compile(
    r"^[0-9a-zA-Z\-%._:]+$"
)  # Kafka's valid host characters (Utils.validHostPattern)


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``host`` as an IP address (a zone id left out), or None when it is not one."""
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


def address_key(host: str) -> str:
    """The IP address a connection is counted under: its canonical text, an IPv4 client of a
    dual-stack socket (``::ffff:A.B.C.D``) as its IPv4 address (Java sees it so), a zone id
    left out. Text that is not an address is kept as it is."""
    address = _address(host)
    if address is None:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def peer_key(peername: Any) -> str:
    """``address_key`` of a socket's peer address (``getpeername``; "" when there is none)."""
    if isinstance(peername, tuple) and peername:
        return address_key(str(peername[0]))
    return ""


def _count(name: str, text: str, least: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"{name}: {text.strip()!r} is not a number") from None
    if not least <= value <= UNLIMITED:
        raise ValueError(f"{name} must be {least}..{UNLIMITED}, got {value}")
    return value


def parse_overrides(
    text: str,
    name: str = OVERRIDES,
    resolve: Callable[[str], list[str]] | None = None,
) -> dict[str, int]:
    """``host:count,host:count`` (Kafka's format: entries split at commas, each at its last
    colon, so an IPv6 address needs no brackets) -> IP address -> count. A host name stands for
    every address it resolves to now (``resolve``; Kafka resolves it at start-up too). A
    ValueError naming ``name`` and the entry for an entry without a count, a count that is not
    a number from 0, a host with characters no host name has, or a name that does not
    resolve."""
    resolve = resolve or _resolve
    out: dict[str, int] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host:
            raise ValueError(f"{name}: {entry!r} is not HOST:COUNT")
        if not _HOST.match(host):
            raise ValueError(f"{name}: {host!r} is not a host name or IP address")
        limit = _count(f"{name} ({entry!r})", count, 0)
        for address in resolve(host):
            out[address_key(address)] = limit
    return out


def _resolve(host: str) -> list[str]:
    if _address(host) is not None:
        return [address_key(host)]
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ValueError(f"{OVERRIDES}: cannot resolve {host!r}: {exc}") from None
    return list(dict.fromkeys(address_key(str(info[4][0])) for info in infos))


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionLimits:
    """One listener's limits (the module doc); the defaults: none."""

    per_ip: int = UNLIMITED
    """``max.connections.per.ip``: connections from one IP address, at most."""
    overrides: Mapping[str, int] = field(default_factory=dict)
    """``max.connections.per.ip.overrides``: IP address (``address_key``) -> its own limit."""
    total: int = UNLIMITED
    """``max.connections``: connections of the listener, at most."""

    @classmethod
    def from_settings(
        cls,
        settings: Mapping[str, str],
        names: tuple[str, str, str] = NAMES,
        resolve: Callable[[str], list[str]] | None = None,
    ) -> ConnectionLimits:
        """From the settings ``names`` (per IP, its overrides, total: Kafka's by default), as
        Kafka checks them: counts from 0, and a per-IP limit of 0 only with overrides (the
        addresses they name are then the only ones served). ValueError naming the setting."""
        per_ip_name, overrides_name, total_name = names
        per_ip = total = UNLIMITED
        if settings.get(per_ip_name) is not None:
            per_ip = _count(per_ip_name, settings[per_ip_name], 0)
        if settings.get(total_name) is not None:
            total = _count(total_name, settings[total_name], 0)
        overrides = parse_overrides(settings.get(overrides_name) or "", overrides_name, resolve)
        if per_ip == 0 and not overrides:
            raise ValueError(f"{per_ip_name} can be 0 only if {overrides_name} is set")
        return cls(per_ip=per_ip, overrides=overrides, total=total)

    @property
    def limited(self) -> bool:
        return self.per_ip < UNLIMITED or bool(self.overrides) or self.total < UNLIMITED


class Slot:
    """One counted connection; :meth:`release` (once, however often it is called) frees it."""

    __slots__ = ("_quotas", "key")

    def __init__(self, quotas: ConnectionQuotas, key: str) -> None:
        self._quotas: ConnectionQuotas | None = quotas
        self.key = key

    def release(self) -> None:
        quotas, self._quotas = self._quotas, None
        if quotas is not None:
            quotas.release(self.key)


class ConnectionQuotas:
    """A listener's open connections, counted against its :class:`ConnectionLimits`.

    ``listener``: its name in the log and the metrics (``kafka``, ``grpc``); ``on_refused``:
    called with (listener, the limit's name, the peer's address) for each refusal."""

    def __init__(
        self,
        limits: ConnectionLimits | None = None,
        listener: str = "",
        on_refused: Callable[[str, str, str], None] | None = None,
    ) -> None:
        self.limits = limits or ConnectionLimits()
        self.listener = listener
        self.on_refused = on_refused
        self.counts: dict[str, int] = {}
        """IP address -> its open connections (an address with none is not kept)."""
        self.total = 0
        self.refused = 0
        self._unlogged = 0
        self._logged_at = -LOG_EVERY_S

    def take(self, peername: Any) -> Slot | None:
        """Count a connection just accepted from ``peername`` (a socket's peer address): its
        slot, or None when a limit refuses it (logged, observed; the caller closes it)."""
        key = peer_key(peername)
        limits = self.limits
        count = self.counts.get(key, 0)
        limit = limits.overrides.get(key, limits.per_ip)
        if count >= limit:
            name = OVERRIDES if key in limits.overrides else PER_IP
            self._refuse(PER_IP, key, f"{key} has {count} connections open ({name}: {limit})")
            return None
        if self.total >= limits.total:
            why = f"the listener has {self.total} connections open ({TOTAL}: {limits.total})"
            self._refuse(TOTAL, key, why)
            return None
        self.counts[key] = count + 1
        self.total += 1
        return Slot(self, key)

    def release(self, key: str) -> None:
        count = self.counts.get(key, 0)
        if count <= 1:
            self.counts.pop(key, None)
        else:
            self.counts[key] = count - 1
        self.total = max(0, self.total - 1)

    def _refuse(self, limit: str, key: str, why: str) -> None:
        self.refused += 1
        if self.on_refused is not None:
            try:
                self.on_refused(self.listener, limit, key)
            except Exception:
                log.exception("Observing a refused connection failed")
        now = time.monotonic()
        if now - self._logged_at < LOG_EVERY_S:
            self._unlogged += 1
            return
        more = f"; {self._unlogged} more refused since the last line" if self._unlogged else ""
        log.warning(
            "Refused a connection from %s on the %s listener: %s%s.",
            key or "?",
            self.listener,
            why,
            more,
        )
        self._logged_at, self._unlogged = now, 0


def admit(slot: Slot | None, quotas: ConnectionQuotas, transport: Any) -> Slot | None:
    """A connection's slot as it is made (``connection_made``): the one counted when it was
    accepted (a TLS listener's: ``tls.TlsServer``), else one taken now; None when a limit
    refuses it — its transport is then closed at once, before anything is read."""
    if slot is None:
        slot = quotas.take(transport.get_extra_info("peername"))
        if slot is None:
            transport.close()
    return slot
