"""The Redis connection, chosen by URL, and the one place Redis's exceptions become ours.

`redis://` and `rediss://` name one Redis; `redis+cluster://host:port` (or `rediss+cluster://`)
names any node of a Redis Cluster, whose other nodes are discovered from it;
`redis+sentinel://host:26379,host:26380/mymaster` (or `rediss+sentinel://`) names the Sentinels
that know where the primary `mymaster` is, asked again on each new connection, so a failover is
followed without a restart (see `SentinelUrl`). Every key of a
partition (and of a group, of the transaction coordinator) shares one hash tag, so each script
runs in one slot and the rest of the store does not care which of the two it talks to.

Outside the store, this module is the one door to a raw client, for what must look beneath the
store on purpose: the benchmarks' raw-Redis baselines and tests reading keys. A `Store` never
hands its own client out.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote

from redis import exceptions as rexc
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.connection import AbstractConnection, Connection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel, SentinelManagedConnection
from redis.backoff import ExponentialBackoff, NoBackoff

from gateway.errors import GatewayError, StorageFull, StorageUnavailable
from gateway.telemetry import redis_round_trip

log = logging.getLogger(__name__)

PRIMARY_WATCH_SECONDS = 0.5  # how often a gateway behind Sentinel asks where the primary is
SENTINEL_ANSWER_SECONDS = 1.0  # a Sentinel's answer later than this is not waited for (it may be stale by then)
UNAVAILABLE = (rexc.ConnectionError, rexc.TimeoutError, rexc.BusyLoadingError, rexc.ClusterDownError, OSError)
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
SENTINEL_PORT = 26379

RedisClient = Redis | RedisCluster
"""Either client: both take the same commands; pipelines differ (see `Scripts.call_many`)."""


def is_cluster_url(url: str) -> bool:
    return url.partition("://")[0] in CLUSTER_SCHEMES


@dataclass(frozen=True)
class SentinelUrl:
    """`redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db][?options]`: the
    Sentinels (port 26379 unless given), the name they monitor the primary by, and the database. The
    user and password are the data nodes'; Sentinels that want their own are given the query options
    `sentinel_username` and `sentinel_password`. `rediss+sentinel://` speaks TLS to both, with redis-py's
    `ssl_*` query options (`ssl_ca_certs`, `ssl_cert_reqs`, `ssl_certfile`, `ssl_keyfile`)."""

    sentinels: list[tuple[str, int]]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_auth: dict[str, str] = field(default_factory=dict)
    tls: dict[str, Any] = field(default_factory=dict)  # {} without TLS; else {"ssl": True, ssl_* options}

    @classmethod
    def parse(cls, url: str) -> SentinelUrl:
        """The URL's parts; a `GatewayError` naming what is wrong with it otherwise."""
        scheme, _, rest = url.partition("://")
        rest, _, query = rest.partition("?")
        userinfo, _, rest = rest.rpartition("@")
        hosts, _, path = rest.partition("/")
        service, _, db = path.partition("/")
        options = dict(parse_qsl(query))
        bad = f"bad Sentinel URL {url!r}:"
        sentinels = []
        for host in filter(None, hosts.split(",")):
            name, colon, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
            if not colon:
                name, port = host, str(SENTINEL_PORT)
            if not name or not port.isdigit() or not 0 < int(port) < 65536:
                raise GatewayError(f"{bad} {host!r} is not host:port")
            sentinels.append((name.strip("[]"), int(port)))
        if not sentinels:
            raise GatewayError(f"{bad} name at least one Sentinel, as host:port[,host:port...]")
        if not service:
            raise GatewayError(f"{bad} name the primary after the Sentinels: .../mymaster")
        if db and not db.isdigit():
            raise GatewayError(f"{bad} the database after the primary's name is a number, not {db!r}")
        unknown = sorted(k for k in options if k not in ("sentinel_username", "sentinel_password")
                         and not k.startswith("ssl_"))
        if unknown:
            raise GatewayError(f"{bad} unknown option {', '.join(unknown)}")
        user, _, password = userinfo.partition(":")
        tls: dict[str, Any] = {}
        if scheme == "rediss+sentinel":
            tls = {"ssl": True, **{k: v for k, v in options.items() if k.startswith("ssl_")}}
        auth = {k.removeprefix("sentinel_"): v for k, v in options.items() if k.startswith("sentinel_")}
        return cls(sentinels, unquote(service), int(db or 0), unquote(user) or None,
                   unquote(password) if userinfo else None, auth, tls)


class EpochSentinels(Sentinel):
    """Sentinels asked as Kafka's clients ask for a partition's leader: the answer with the highest
    config epoch wins, and none older than one already followed is taken (KIP-320's leader epochs).

    redis-py takes the first Sentinel that names a primary, and waits for its answer as long as the
    connection does. A Sentinel cut off with the old primary (a minority) keeps naming it, with the
    epoch from before the failover, and a question sent to it during the cut is answered when the cut
    heals: the gateway went back to the old primary, which still took writes and served its shorter
    log until the Sentinels demoted it seconds later (a consumer told OFFSET_OUT_OF_RANGE reset to its
    input's start; tests/jepsen soak sentinel:1026397558 and sentinel:477648183). redis-py's reordering
    of its Sentinel list by concurrent lookups also lost a Sentinel from the list there. So every
    Sentinel is asked at once, each answer waited for `SENTINEL_ANSWER_SECONDS` at most, and the list
    is left as configured. An older epoch than the highest followed is taken only from a majority of
    the Sentinels (they were replaced and count again from 0)."""

    epoch = -1  # the highest config epoch followed
    _looking: asyncio.Future[tuple[str, int]] | None = None

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        """Where the Sentinels say `service_name`'s primary is; concurrent callers share one look."""
        if self._looking is None or self._looking.done():
            self._looking = asyncio.ensure_future(self._look(service_name))
            self._looking.add_done_callback(lambda look: look.cancelled() or look.exception())
        return await asyncio.shield(self._looking)

    async def _look(self, service_name: str) -> tuple[str, int]:
        answers = await asyncio.gather(*(self._ask(s, service_name) for s in self.sentinels))
        named = [(int(state.get("config-epoch", 0)), str(state["ip"]), int(state["port"]))
                 for state in answers if state is not None]
        if not named:
            raise MasterNotFoundError(f"No master found for {service_name!r}: no Sentinel names one now")
        newest = max(named)
        epoch, host, port = newest
        if epoch < self.epoch and 2 * named.count(newest) <= len(self.sentinels):
            raise MasterNotFoundError(f"No master found for {service_name!r}: the Sentinels that answered name "
                                      f"{host}:{port} at config epoch {epoch}, older than epoch {self.epoch} followed")
        self.epoch = epoch
        return host, port

    async def _ask(self, sentinel: Redis, service_name: str) -> dict[str, Any] | None:
        """`sentinel`'s state of the primary if it names a usable one in time, else None."""
        state = await self._state(sentinel, service_name)
        return state if state and self.check_master_state(state, service_name) else None

    async def _state(self, sentinel: Redis, service_name: str) -> dict[str, Any] | None:
        """`sentinel`'s state of the primary as it answers in time (its flags too), else None."""
        try:
            async with asyncio.timeout(SENTINEL_ANSWER_SECONDS):
                masters: dict[str, dict[str, Any]] = await sentinel.sentinel_masters()  # type: ignore[assignment]
        except (*UNAVAILABLE, rexc.ResponseError):
            return None
        return masters.get(service_name)

    async def replacing(self, service_name: str, primary: tuple[str, int]) -> str | None:
        """Why `primary` may be on its way out, asked of every Sentinel now; None when a majority
        answers and none is failing it over or names a newer primary.

        Sentinel names the old primary until the replica it promoted confirms (seconds after its
        `REPLICAOF NO ONE`), and only its leader flags the failover meanwhile. A primary paused past
        the Sentinels' patience and resumed in between still takes writes, and the replica it kept
        acknowledges them to WAIT, until it is demoted and they are gone (soak sentinel:929668516:
        acks=all records and transaction steps lost, then librdkafka's fatal out-of-order sequence
        and INVALID_TXN_STATE). Kafka's leader cannot drop a follower from its ISR without the
        controller's consent (`Partition.prepareIsrShrink`, AlterPartition), which a deposed leader
        never gets; this is that consent."""
        answers = [state for state in await asyncio.gather(*(self._state(s, service_name) for s in self.sentinels))
                   if state is not None]
        if 2 * len(answers) <= len(self.sentinels):
            return f"{len(answers)} of {len(self.sentinels)} Sentinels answered"
        named = [(int(state.get("config-epoch", 0)), str(state["ip"]), int(state["port"])) for state in answers]
        for (_, *where), state in zip(named, answers, strict=True):
            flags = state["flags"] if isinstance(state["flags"], set) else set(str(state["flags"]).split(","))
            if tuple(where) == primary and "failover_in_progress" in flags:
                return f"a Sentinel is failing {primary[0]}:{primary[1]} over"
        # the newest config epoch names it (a Sentinel cut off with an older primary names that one at an
        # older epoch; the failover's leader names the old one at the new epoch until the failover ends)
        top = max(epoch for epoch, _, _ in named)
        newest = sorted({f"{host}:{port}" for epoch, host, port in named if epoch == top})
        if f"{primary[0]}:{primary[1]}" not in newest:
            return f"the Sentinels name {', '.join(newest)} at config epoch {top}"
        return None


class SentinelRedis(Redis):
    """The client of a primary found through Sentinel; closing it closes the Sentinel connections too."""

    sentinels: EpochSentinels
    service: str

    async def discover_primary(self) -> tuple[str, int]:
        """Where the Sentinels say the primary is now (`MasterNotFoundError` when none says)."""
        host, port = await self.sentinels.discover_master(self.service)
        return str(host), int(port)

    async def replacing(self, primary: tuple[str, int]) -> str | None:
        """Why the Sentinels may be replacing `primary` now (`EpochSentinels.replacing`), or None."""
        return await self.sentinels.replacing(self.service, primary)

    def primary_seen(self) -> tuple[str, int] | None:
        """Where this client's pool last found the primary (it asks on each new connection)."""
        seen = getattr(self.connection_pool, "master_address", None)
        return (str(seen[0]), int(seen[1])) if seen else None

    async def follow_primary(self, follow: Callable[[tuple[str, int]], None],
                             every: float = PRIMARY_WATCH_SECONDS) -> None:
        """Ask the Sentinels where the primary is every `every` seconds, for ever, and drop every
        connection to another node, those in use too (their requests fail, retriably, and are sent
        again to the primary); `follow(primary)` does the same for the connections beside redis-py.
        Without this a primary paused through a failover is still used when it resumes, until the
        Sentinels demote it seconds later: it answers requests held in its sockets and new ones alike
        from its own log, which lacks what the new primary took meanwhile (tests/jepsen's
        primary-paused), and once demoted it answers reads, empty while it resyncs. Each look drops
        them anew: a connection that was opening to the paused node (its handshake waits as long as
        the pause does) is made to it only when it resumes. Kafka's clients meet the same thing as a
        leader epoch that moved on (KIP-320)."""
        seen = self.primary_seen()
        while True:
            await asyncio.sleep(every)  # a period, not a stand-in for an event: Sentinel pushes none to a client
            try:
                now = await self.discover_primary()
            except (*UNAVAILABLE, MasterNotFoundError):
                continue  # mid-failover no Sentinel names one: the next look finds it
            if seen is not None and now != seen:
                log.warning("the Sentinels name %s:%d the primary now, not %s:%d: dropping the connections to "
                            "the old one", *now, *seen)
            seen = now
            follow(now)
            pool = self.connection_pool
            pool.master_address = now  # type: ignore[attr-defined]
            # redis-py's pool.disconnect() waits for its lock, which a connection opening to a stopped node holds
            held: list[Any] = [*pool._available_connections, *pool._in_use_connections]
            for conn in held:
                if conn.is_connected and (str(conn.host), int(conn.port)) != now:
                    await conn.disconnect(nowait=True)

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        await self.sentinels.aclose()


def connect(url: str, *, max_connections: int = 64) -> RedisClient:
    """A client that retries a dropped connection briefly, then lets the caller see the outage."""
    options: dict[str, Any] = {
        "decode_responses": False,
        "max_connections": max_connections,  # per node on a cluster
        "socket_connect_timeout": 2,
        "health_check_interval": 10,
        "socket_read_size": 1 << 20,  # a fetch reads megabyte batches: 16 reads of 64 KB cost more
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.02), 3),
        "retry_on_error": [rexc.ConnectionError, rexc.TimeoutError, rexc.BusyLoadingError],
    }
    scheme, _, rest = url.partition("://")
    client: RedisClient
    if scheme in SENTINEL_SCHEMES:
        client = _sentinel_client(SentinelUrl.parse(url), options)
        client.connection_pool.connection_class = _counted(client.connection_pool.connection_class)
    elif scheme in CLUSTER_SCHEMES:
        client = RedisCluster.from_url(f"{CLUSTER_SCHEMES[scheme]}://{rest}", **options)
        nodes = client.nodes_manager
        nodes.connection_kwargs["connection_class"] = _counted(nodes.connection_kwargs.get("connection_class", Connection))
        for node in nodes.startup_nodes.values():
            node.connection_class = _counted(node.connection_class)
    else:
        client = Redis.from_url(url, **options)
        client.connection_pool.connection_class = _counted(client.connection_pool.connection_class)
    return client


_COUNTED: dict[type[Any], type[Any]] = {}


def _transport_closed(exc: BaseException) -> bool:
    """Whether `exc` is a write meeting a connection that another task closed under it, which
    redis-py lets through as it comes instead of as its ConnectionError: uvloop's RuntimeError for
    a closed transport ("... the handler is closed"), or AttributeError for the writer redis-py's
    disconnect already dropped. A Cluster client's free connections are disconnected when one
    command meets a ConnectionError (`ClusterNode.disconnect_free_connections`) while they stay in
    the free queue, so another task takes one mid-disconnect (tests/jepsen's soak, seeds
    cluster:946129829 and cluster:36135963: produces answered UNKNOWN_SERVER_ERROR)."""
    if isinstance(exc, RuntimeError):
        return "handler is closed" in str(exc)
    return isinstance(exc, AttributeError) and exc.obj is None and _raised_in_redis_py(exc)


def _raised_in_redis_py(exc: BaseException) -> bool:
    """Whether `exc` was raised inside redis-py, not by the gateway's own code around its call."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and f"{os.sep}redis{os.sep}" in tb.tb_frame.f_code.co_filename


def _counted(base: type[Any]) -> type[Any]:
    """`base` (a connection class) whose writes count as round trips of the request being handled
    (`telemetry`): the one hook that sees every command and pipeline sent, on one Redis or a cluster.
    A write to a connection closed under it raises redis-py's ConnectionError (`_transport_closed`):
    redis-py then retries it on a new connection, and the store maps it to `StorageUnavailable`."""
    if base in _COUNTED:
        return _COUNTED[base]
    send = base.send_packed_command

    async def send_packed_command(
        self: AbstractConnection, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        if check_health:  # a connection's own handshake and health checks are not the caller's
            redis_round_trip()
        try:
            await send(self, command, check_health)
        except (RuntimeError, AttributeError) as exc:
            if not _transport_closed(exc):
                raise
            raise rexc.ConnectionError(f"connection to {self._host_error()} closed under a write") from exc

    counted = _COUNTED[base] = type(f"Counted{base.__name__}", (base,), {"send_packed_command": send_packed_command})
    return counted


def _sentinel_client(parsed: SentinelUrl, options: dict[str, Any]) -> SentinelRedis:
    """A primary's client whose pool asks the Sentinels on each new connection, and drops a connection
    to a primary that was demoted (its READONLY answer): requests in flight meet `ConnectionError`."""
    # a Sentinel that does not answer is passed over for the next at once, not retried with backoff
    asking = {"socket_connect_timeout": options["socket_connect_timeout"], "retry": Retry(NoBackoff(), 0)}
    sentinels = EpochSentinels(  # type: ignore[no-untyped-call]
        parsed.sentinels, sentinel_kwargs={**asking, **parsed.sentinel_auth, **parsed.tls},
        username=parsed.username, password=parsed.password, db=parsed.db, **parsed.tls, **options)
    client: SentinelRedis = sentinels.master_for(parsed.service, redis_class=SentinelRedis, check_connection=True)
    client.sentinels, client.service = sentinels, parsed.service
    pool = client.connection_pool
    pool.connection_class = type("Following" + pool.connection_class.__name__, (pool.connection_class,),
                                 {"connect_to": _connect_to_primary})
    return client


async def _connect_to_primary(self: SentinelManagedConnection, address: tuple[str, int]) -> None:
    """A pool connection's opening to `address`, dropped (and retried, the Sentinels asked again) when
    the pool has learnt meanwhile that the primary is elsewhere (`SentinelRedis.follow_primary`). An
    opening to a primary that stopped answering, or was cut off, waits in its handshake for as long as
    that lasts, the pool's lock held; once it resumes it would serve the request that asked for the
    connection from its own log, though the Sentinels replaced it meanwhile."""
    await SentinelManagedConnection.connect_to(self, address)  # type: ignore[no-untyped-call]
    now = self.connection_pool.master_address
    if now is not None and (str(now[0]), int(now[1])) != (str(address[0]), int(address[1])):
        await self.disconnect()
        raise rexc.ConnectionError(f"{address[0]}:{address[1]} is no longer the primary: the Sentinels name "
                                   f"{now[0]}:{now[1]}")


OOM_WARNING_EVERY = 60.0
"""Seconds between the warnings that Redis refuses writes for memory: one a minute, not one a request."""
_oom_warned = -OOM_WARNING_EVERY
_oom_refused = 0  # refusals since the last warning


def storage_full(exc: BaseException | object) -> StorageFull | None:
    """Redis's OOM refusal (a write past its maxmemory, under `noeviction`) as the retriable
    `StorageFull`, else None. Redis checks memory before a script's first write, so a refused script
    wrote nothing: nothing is half-done. Warns once a minute while refusals last."""
    if not isinstance(exc, rexc.ResponseError) or not str(exc).startswith("OOM"):
        return None
    global _oom_warned, _oom_refused
    _oom_refused += 1
    now = time.monotonic()
    if now - _oom_warned >= OOM_WARNING_EVERY:
        log.warning("Redis refused %d write(s) for memory (OOM: used memory above its maxmemory); they were "
                    "answered with a retriable error. Free memory (retention, DeleteRecords, deleting topics) "
                    "or raise maxmemory", _oom_refused)
        _oom_warned, _oom_refused = now, 0
    return StorageFull("redis is out of memory (maxmemory reached); retry once memory is freed")


def storage_error(exc: BaseException | object) -> StorageUnavailable | StorageFull | None:
    """Redis's failure as ours, else None: away (its connection lost, refused, timed out, or closed
    under a read or write in flight; a Cluster down, or none of its nodes reachable) as the retriable
    `StorageUnavailable`, out of memory as `StorageFull`."""
    if isinstance(exc, UNAVAILABLE) or (isinstance(exc, BaseException) and _transport_closed(exc)) or (
            isinstance(exc, rexc.RedisClusterException) and isinstance(exc.__cause__, UNAVAILABLE)):
        return StorageUnavailable(f"redis unavailable: {exc}")
    return storage_full(exc)


class _StorageErrors:
    """`storage_errors`' context: a class, not a generator, as every Redis call enters one and a
    generator's context costs a generator, its frame and two steps of it each time."""

    __slots__ = ()

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        """Never swallows an exception (None): mypy then knows code after the block is reached only normally."""
        if (ours := storage_error(exc)) is not None:
            raise ours from exc


_STORAGE_ERRORS = _StorageErrors()


def storage_errors() -> _StorageErrors:
    """Turn Redis being away into the retriable `StorageUnavailable`, and Redis out of memory into
    the retriable `StorageFull`."""
    return _STORAGE_ERRORS


async def wait_reachable(redis: RedisClient, url: str, timeout: float) -> None:
    """PING until Redis answers, quietly: for `timeout` seconds, and for as long as it answers that it
    is still loading its data (a slow start, not an absent server). Then `StorageUnavailable` saying
    why, in one line."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    problem = "no answer"
    while (left := deadline - loop.time()) > 0:
        try:
            async with asyncio.timeout(left):
                await redis.ping()
            return
        except TimeoutError:
            break
        except MasterNotFoundError:  # its message lists each Sentinel's client at length
            problem = f"no Sentinel named there answers with a primary called {getattr(redis, 'service', '')!r}"
        except rexc.BusyLoadingError:
            if problem != "loading":
                log.info("Redis at %s is loading its data; waiting for it", url)
            problem, deadline = "loading", loop.time() + timeout
        except (rexc.RedisError, rexc.RedisClusterException, OSError) as exc:  # the latter is no RedisError
            problem = " ".join(str(exc).split()).rstrip(".") or type(exc).__name__
        await asyncio.sleep(min(0.2, max(0.0, deadline - loop.time())))
    raise StorageUnavailable(f"cannot reach Redis at {url}: {problem}")
