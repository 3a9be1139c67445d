"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-546), shared by every gateway through Redis.

Configured per user, client id, or both (a None name is the `<default>` entity), and looked up as
Kafka's DefaultQuotaCallback does, each quota key on its own, first match wins (KIP-55):
user+client, user+<default> client, user, <default> user+client, <default>+<default>, <default>
user, client, <default> client. The matched level names the usage counter (Kafka's metric tags),
so a default quota is held by each user or client on its own.

Usage is Kafka's sampled Rate (quota.window.num samples of quota.window.size.seconds, SampledStat),
kept in Redis so that a client spread over several gateways has its quota once; the samples are
aligned to window boundaries so every gateway adds to the same ones. A violation's throttle time is
Kafka's QuotaUtils.throttleTime: (rate - bound) / bound * the window the rate spans.

The hot path stays cheap: the configuration is read into memory (at most `cache_seconds` old,
re-read in the background), and a request no quota applies to costs a dict lookup and no Redis
round trip; one that has a quota records its usage with one script call.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gateway import clock
from gateway.errors import GatewayError, InvalidRequest, UnsupportedVersion
from gateway.store import Store
from gateway.store.quotas import Entity

log = logging.getLogger(__name__)

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCE, FETCH, REQUEST, MUTATION = "producer_byte_rate", "consumer_byte_rate", "request_percentage", \
    "controller_mutation_rate"
CONNECTIONS = "connection_creation_rate"
_LONGS = frozenset({PRODUCE, FETCH})  # QuotaConfigs' LONG keys; the others are DOUBLE
_CLIENT_KEYS = frozenset({PRODUCE, FETCH, REQUEST, MUTATION})  # QuotaConfigs.userConfigs/clientConfigs
_IP_KEYS = frozenset({CONNECTIONS})
WINDOW_MS = 1000  # quota.window.size.seconds (1)
SAMPLES = 11  # quota.window.num
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2  # DescribeClientQuotasRequest's match types

ANONYMOUS = "ANONYMOUS"  # the principal of an unauthenticated connection, as Kafka names it


@dataclass(frozen=True)
class Alteration:
    """One entity's changes: quota key -> new value, None to remove it."""

    entity: Sequence[tuple[str, str | None]]
    ops: Sequence[tuple[str, float | None]]


def sort_entity(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    return tuple(sorted(pairs, key=lambda p: p[0]))


def refusal(a: Alteration) -> str | None:
    """Why Kafka's ClientQuotaControlManager refuses an alteration (INVALID_REQUEST), or None."""
    keys = [k for k, _ in a.ops]
    if duplicate := next((k for k in keys if keys.count(k) > 1), None):
        return f"Duplicate quota key {duplicate} not updating quota for this entity"
    if not a.entity:
        return "Invalid empty client quota entity"
    seen: set[str] = set()
    for kind, name in a.entity:
        if kind in seen:
            return f"Invalid empty client quota entity, duplicate entity entry {kind}"
        if kind not in (USER, CLIENT_ID, IP):
            return f"Unhandled client quota entity type: {kind}"
        if name == "":
            return f"Empty {kind} not supported"
        seen.add(kind)
    if IP in seen:
        if seen != {IP}:
            return "Invalid empty client quota entity"
        ip = dict(a.entity)[IP]
        if ip is not None and not _is_ip(ip):
            return f"{ip} is not a valid IP or resolvable host."
    allowed = _IP_KEYS if IP in seen else _CLIENT_KEYS
    for key, value in a.ops:
        if value is None:
            continue
        if key not in allowed:
            return f"Invalid configuration key {key}"
        if key in _LONGS and abs(int(value + 1e-6) - value) > 1e-6:
            return f"{key} cannot be a fractional value."
    return None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return name == "localhost"
    return True


def matching(quotas: dict[Entity, dict[str, float]], components: Sequence[tuple[str, int, str | None]],
             strict: bool) -> list[tuple[Entity, dict[str, float]]]:
    """The entities a DescribeClientQuotas filter names, as Kafka's ClientQuotasImage.describe
    picks them: (entity type, match type, match) components."""
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for kind, match_type, match in components:
        if not kind:
            raise InvalidRequest("Invalid empty entity type.")
        if kind in exact or kind in typed:
            raise InvalidRequest(f"Entity type {kind} cannot appear more than once in the filter.")
        if kind not in (IP, USER, CLIENT_ID):
            raise UnsupportedVersion(f"Unsupported entity type {kind}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise InvalidRequest("Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[kind] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise InvalidRequest("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[kind] = None
        elif match_type == MATCH_SPECIFIED:
            if match is not None:
                raise InvalidRequest("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            typed.add(kind)
        else:
            raise InvalidRequest(f"Unknown match type {match_type}")
    if (IP in exact or IP in typed) and ({USER, CLIENT_ID} & (set(exact) | typed)):
        raise InvalidRequest("Invalid entity filter component combination. IP filter component should not be "
                             "used with user or clientId filter component.")
    if not exact and not typed:
        return [] if strict else list(quotas.items())
    out = []
    for entity, values in quotas.items():
        names = dict(entity)
        if any(k not in names or names[k] != v for k, v in exact.items()) or any(k not in names for k in typed):
            continue
        if strict and len(entity) != len(exact) + len(typed):
            continue
        out.append((entity, values))
    return out


def _levels(user: str, client_id: str) -> list[tuple[Entity, str, str]]:
    """KIP-55's order of precedence: (entity, the counter's user tag, its client tag)."""
    both, u, c = ((CLIENT_ID, client_id), (USER, user)), ((USER, user),), ((CLIENT_ID, client_id),)
    return [
        (both, user, client_id),
        (((CLIENT_ID, None), (USER, user)), user, client_id),
        (u, user, ""),
        (((CLIENT_ID, client_id), (USER, None)), user, client_id),
        (((CLIENT_ID, None), (USER, None)), user, client_id),
        (((USER, None),), user, ""),
        (c, "", client_id),
        (((CLIENT_ID, None),), "", client_id),
    ]


def throttle_ms(total: float, oldest: int, now: int, bound: float) -> int:
    """Kafka's QuotaUtils.throttleTime for the rate `total` over the samples since `oldest`; 0 within
    the bound. The rate's window is Rate.windowSize: the time the samples span, at least
    quota.window.num - 1 full windows."""
    elapsed = now - oldest
    full = elapsed // WINDOW_MS
    if full < SAMPLES - 1:
        elapsed += (SAMPLES - 1 - full) * WINDOW_MS
    rate = total / (elapsed / 1000)
    if rate <= bound:
        return 0
    if bound <= 0:
        return elapsed
    return int((rate - bound) / bound * elapsed + 0.5)  # Java's Math.round


class QuotaService:
    def __init__(self, store: Store, cache_seconds: float = 1.0) -> None:
        self.store = store.quotas
        self.cache_seconds = cache_seconds
        self._quotas: dict[Entity, dict[str, float]] = {}
        self._keys: frozenset[str] = frozenset()  # the quota keys some entity sets
        self._expires = 0.0
        self._reload: asyncio.Task[None] | None = None
        self.throttled: dict[tuple[str, str, str, str], tuple[int, int]] = {}
        """(quota key, user tag, client tag, ip tag) -> (throttles, their ms): the metrics. The ip is
        connection_creation_rate's tag alone, as Kafka tags that quota."""

    async def describe(self, components: Sequence[tuple[str, int, str | None]],
                       strict: bool) -> list[tuple[Entity, dict[str, float]]]:
        return matching(await self.store.all(), components, strict)

    async def alter(self, alterations: Sequence[Alteration], validate_only: bool) -> list[str | None]:
        """Each alteration's refusal (None: done); the accepted ones are written at once."""
        refused = [refusal(a) for a in alterations]
        entities = [sort_entity(a.entity) for a in alterations]
        for i, e in enumerate(entities):  # ClientQuotaControlManager: an entity named twice is refused
            if refused[i] is None and entities.count(e) > 1:
                refused[i] = f"Ignoring duplicate entity {e}"
        changes = [(e, dict(a.ops)) for a, e, why in zip(alterations, entities, refused, strict=True) if why is None]
        if changes and not validate_only:
            await self.store.alter(changes)
            await self._load()  # in force on this gateway at once, on the others within cache_seconds
        return refused

    def _fresh(self) -> None:
        """Start re-reading the configuration when it is older than `cache_seconds`; requests go on
        with what was read last meanwhile."""
        if time.monotonic() >= self._expires and (self._reload is None or self._reload.done()):
            self._reload = asyncio.ensure_future(self._load())

    async def load(self) -> None:
        """Read the configuration now (a gateway's first request, and tests, need not wait for it)."""
        await self._load()

    async def _load(self) -> None:
        try:
            quotas = await self.store.all()
        except GatewayError as exc:
            log.warning("cannot read client quotas (%s); keeping the last ones", exc)
            self._expires = time.monotonic() + self.cache_seconds
            return
        self._quotas = quotas
        self._keys = frozenset(k for v in quotas.values() for k in v)
        self._expires = time.monotonic() + self.cache_seconds

    def applies(self, key: str, user: str, client_id: str) -> tuple[float, str, str] | None:
        """The quota `key` that binds this user and client (bound, user tag, client tag), or None.
        Costs a set lookup when no entity sets `key`: the unthrottled hot path."""
        self._fresh()
        if key not in self._keys:
            return None
        for entity, tag_user, tag_client in _levels(user, client_id):
            values = self._quotas.get(entity)
            if values is not None and key in values:
                return values[key], tag_user, tag_client
        return None

    def window_max(self, key: str, user: str | None, client_id: str | None) -> int | None:
        """The most a quota lets through in one rate window (ClientQuotaManager.getMaxValueInQuotaWindow:
        quota * (quota.window.num - 1) windows), or None: Kafka caps a fetch at it, so that one
        response never outgrows the quota for good."""
        found = self.applies(key, user or ANONYMOUS, client_id or "")
        return None if found is None else int(found[0] * (SAMPLES - 1) * WINDOW_MS / 1000)

    async def mutate(self, user: str | None, client_id: str | None, permits: int, strict: bool) -> tuple[bool, int]:
        """Controller mutations (KIP-599): whether `permits` partitions may be created or deleted
        now, and the throttle time it earns, as Kafka's Strict- and PermissiveControllerMutationQuota
        decide: a strict quota refuses while the bucket is below zero (throttled until it is back),
        a permissive one takes the permits and throttles once below zero."""
        found = self.applies(MUTATION, user or ANONYMOUS, client_id or "")
        if found is None:
            return True, 0
        bound, tag_user, tag_client = found
        burst = bound * SAMPLES * WINDOW_MS / 1000
        taken, tokens = await self.store.take(tag_user, tag_client, clock.now_ms(), permits, bound, burst, strict)
        took = int(-tokens / bound * 1000 + 0.5) if tokens < 0 and (not taken or not strict) and bound > 0 else 0
        if took:
            self._count(MUTATION, tag_user, tag_client, took)
        return taken, took

    def sets(self, key: str) -> bool:
        """Whether some entity sets quota `key`: a set lookup, so that a request no such quota can
        bind skips even measuring what it would record."""
        self._fresh()
        return key in self._keys

    async def record(self, key: str, user: str | None, client_id: str | None, amount: float) -> int:
        """Record usage of `key` by this user and client; the throttle time in ms it earns (0 when
        no quota applies, with no Redis round trip, and while Redis cannot be reached). Request time
        and connection rates throttle at most one window (ClientRequestQuotaManager's and
        ConnectionQuotas' QuotaUtils.boundedThrottleTime); the byte rates without bound."""
        found = self.applies(key, user or ANONYMOUS, client_id or "")
        if found is None:
            return 0
        bound, tag_user, tag_client = found
        return await self._record(key, tag_user, tag_client, bound, amount)

    async def _record(self, key: str, tag_user: str, tag_client: str, bound: float, amount: float) -> int:
        now = clock.now_ms()
        try:
            total, oldest = await self.store.record(key, tag_user, tag_client, now, amount, WINDOW_MS, SAMPLES)
        except GatewayError as exc:  # the request itself is done: it is answered, unthrottled
            log.warning("cannot record %s usage of %s/%s (%s); not throttling", key, tag_user, tag_client, exc)
            return 0
        took = throttle_ms(total, oldest, now, bound)
        took = took if key in (PRODUCE, FETCH) else min(took, WINDOW_MS)
        if log.isEnabledFor(logging.DEBUG):  # `--log-level DEBUG`: how a quota is held, request by request
            log.debug("%s of %s/%s: %g recorded, %g over the samples since %d ms ago (quota %g/s): throttle %d ms",
                      key, tag_user, tag_client, amount, total, now - oldest, bound, took)
        return took

    def count(self, key: str, user: str | None, client_id: str | None, took: int) -> None:
        """Count a throttle of `took` ms for the entity quota `key` bound (Kafka's throttle-time
        sensor, recorded by ClientQuotaManager.throttle for the quota whose throttle the response got)."""
        found = self.applies(key, user or ANONYMOUS, client_id or "")
        if found is not None:
            self._count(key, found[1], found[2], took)

    def _count(self, key: str, tag_user: str, tag_client: str, took: int, ip: str = "") -> None:
        count, ms = self.throttled.get((key, tag_user, tag_client, ip), (0, 0))
        self.throttled[(key, tag_user, tag_client, ip)] = (count + 1, ms + took)

    def connection_rate(self, ip: str) -> float | None:
        """The connection_creation_rate that binds this IP (its own entity's, else the `<default>`
        ip's), as ConnectionQuotas.connectionRateForIp finds it; an int there, as here."""
        self._fresh()
        if CONNECTIONS not in self._keys:
            return None
        for name in (ip, None):
            values = self._quotas.get(((IP, name),))
            if values is not None and CONNECTIONS in values:
                return float(int(values[CONNECTIONS]))
        return None

    async def connect(self, ip: str) -> int:
        """Record a new connection from `ip`: the ms it is to be held and then closed (0: served), as
        ConnectionQuotas.recordIpConnectionMaybeThrottle decides; a refused connection is taken off
        the count again, and shows in the metrics under the ip."""
        bound = self.connection_rate(ip)
        if bound is None:
            return 0
        took = await self._record(CONNECTIONS, ip, "", bound, 1.0)
        if took:
            await self._record(CONNECTIONS, ip, "", bound, -1.0)
            self._count(CONNECTIONS, "", "", took, ip)
        return took
