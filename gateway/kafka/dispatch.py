"""The registry of Kafka API handlers: one decorator per API, keyed by api key and version range.

How to add an API (e.g. the consumer-group module)::

    from gateway.kafka.dispatch import ApiKey, RequestContext, handles

    @handles(ApiKey.JOIN_GROUP, 0, 9)
    async def join_group(ctx: RequestContext, req: Any) -> Any:
        ...  # `req` is the kio request of version ctx.api_version
        return response_class(...)  # a kio response of the same version

A handler receives the decoded kio request (the class picked from api key + version) and returns:
  - a kio response object of the same api key and version (encoded with kio), or
  - an `Encoded` (body chunks from a hand-written encoder, and the error codes in them; the header
    is added for it), or
  - None: send nothing (Produce with acks=0 is the only user).

Every module of the `gateway.kafka` package is imported by `load_handlers()` when the listener
starts, so a new module only needs its decorators. ApiVersions is computed from this registry, so
what is advertised is exactly what is registered. Each version in a declared range must exist in
kio (checked at registration). Requests of one connection are handled one at a time, in order
(Kafka semantics), so a handler may rely on the order of a client's requests. An exception that
escapes a handler closes that connection (clients reconnect and retry); errors a client should
see belong in the response, mapped with `gateway.kafka.errors.kafka_error`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.security import Operation, ResourceType
from gateway.domain.services import Services
from gateway.kafka.codec import find_response_class, request_class


class ApiKey(IntEnum):
    """Kafka's api keys by name, e.g. `ApiKey.PRODUCE` (0): kio's index of the protocol
    (`kio.schema.index.api_key_map`, which a test holds this to), spelled out for the type checker."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    ENVELOPE = 58
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    CONTROLLER_REGISTRATION = 70
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    ASSIGN_REPLICAS_TO_DIRS = 73
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    UPDATE_RAFT_VOTER = 82
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    STREAMS_GROUP_HEARTBEAT = 88
    STREAMS_GROUP_DESCRIBE = 89
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92
    STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE = 93


@dataclass
class ConnectionState:
    """What lives as long as one client connection; `extra` is for handlers' own per-connection data."""

    peer: str
    local_port: int = 0
    host: str | None = None  # the client's IP address, which ACLs for a host match  # the port the client reached, advertised when no other port is configured
    extra: dict[str, Any] = field(default_factory=dict)
    principal: str | None = None  # who authenticated (SASL); None before that, or with authentication off
    token_authenticated: bool = False  # logged in with a delegation token, which may not create or renew one
    sasl: Any = None  # the SASL exchange under way (gateway.kafka.sasl)
    close: bool = False  # set by a handler: close the connection once its response is written
    muted_until: float = 0.0  # a throttled client's requests are not read before (monotonic time, KIP-219)
    throttled: bool = False  # a quota has throttled this connection: its requests are read one at a time
    # run once the connection has closed, one per key (a share session ends with its connection)
    closers: dict[object, Callable[[], Awaitable[None]]] = field(default_factory=dict)


@dataclass
class RequestContext:
    """Everything a handler may need besides the request body."""

    services: Services
    connection: ConnectionState
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int = 0  # the request's bytes, as a produce quota counts them
    began: float = 0.0  # when its handling began (perf_counter), as a request-time quota counts it
    remote: float = 0.0  # seconds of that spent waiting for data, which it does not count (a fetch's wait)
    sent: Callable[[], None] = lambda: None
    """Called by a handler once its writes are on their way to Redis in order: the connection may
    then start the next request (`KafkaConnection`), whose writes will follow these."""

    async def allowed(self, resource: ResourceType, name: str, operation: Operation) -> bool:
        """Whether this connection's principal may (always, with authentication off)."""
        return await self.services.security.authorize(
            self.connection.principal, resource, name, operation, self.connection.host
        )

    async def authorized_operations(self, resource: ResourceType, name: str) -> list[Operation]:
        """What this connection's principal may do on the resource (KIP-430's authorized operations)."""
        return await self.services.security.authorized_operations(
            self.connection.principal, resource, name, self.connection.host
        )


class Encoded(NamedTuple):
    """A response body already encoded as chunks (written with `writelines`, records uncopied),
    with the error codes it carries (other than none), which the request metrics count."""

    chunks: list[bytes | memoryview]
    errors: Collection[KafkaError] = ()
    throttle_at: int | None = None  # where in the first chunk its throttle_time_ms is, if it has one


Handler = Callable[[RequestContext, Any], Awaitable[Any]]


@dataclass(frozen=True)
class Registration:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


_REGISTRY: dict[int, Registration] = {}


def handles(api_key: int, min_version: int, max_version: int) -> Callable[[Handler], Handler]:
    """Register the decorated coroutine as the handler of `api_key` for versions min..max."""

    def register(fn: Handler) -> Handler:
        if api_key in _REGISTRY and _REGISTRY[api_key].handler is not fn:
            existing = _REGISTRY[api_key].handler
            raise ValueError(f"api key {api_key} already handled by {existing.__module__}.{existing.__name__}")
        for v in range(min_version, max_version + 1):
            if request_class(api_key, v) is None or find_response_class(api_key, v) is None:
                raise LookupError(f"no schema for api key {api_key} v{v}")
        _REGISTRY[api_key] = Registration(api_key, min_version, max_version, fn)
        return fn

    return register


def lookup(api_key: int, version: int) -> Registration | None:
    """The registration serving this key and version, or None (answered with UNSUPPORTED_VERSION)."""
    reg = _REGISTRY.get(api_key)
    return reg if reg is not None and reg.supports(version) else None


def supported() -> list[Registration]:
    """Every registered API, by api key: the content of ApiVersions."""
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def load_handlers() -> None:
    """Import every module of `gateway.kafka` so their `@handles` decorators run."""
    import gateway.kafka as package

    for mod in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{mod.name}")
