"""The registry of native request handlers: one decorator per request, keyed by the request's body.

How to add a request (say `pb.Request.frobnicate`)::

    from gateway.native.dispatch import Session, handles

    @handles("frobnicate")
    async def frobnicate(s: Session, req: pb.Request) -> pb.Response:
        ...  # req.frobnicate is the body
        return pb.Response(success=pb.Success())

A handler returns a `pb.Response` (the connection sets its request id), an `Encoded` (a frame
already encoded as chunks, written uncopied), or None (no answer). Raising answers with an error
frame; a `GatewayError` carries its code, anything else is logged and answered UNKNOWN. Nothing is
written for a request id of 0.

Requests registered with `handles_in_order` (sends and watermark sends) do not go through the loop
one at a time: they are queued and handed over in runs, in arrival order, as many as have arrived,
and every one of them is answered, in order, with a response or the exception it came to.

Every module of `gateway.native` is imported by `load_handlers()` when the listener starts, so a
new module only needs its decorators.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from gateway.domain.producers import ProducerService
from gateway.domain.security import Operation, ResourceType
from gateway.domain.services import Services
from gateway.domain.subscriptions import Consumer, SubscriptionService
from gateway.errors import AuthorizationFailed, GatewayError, NotAllowed, SubscriptionNotFound
from gateway.pb import gateway_pb2 as pb

if TYPE_CHECKING:
    from gateway.native.produce import Producer
    from gateway.native.transactions import TxnSession

Chunks = list[bytes | memoryview]
T = TypeVar("T")


@dataclass
class Session:
    """What lives as long as one client connection: its producers, consumers and transactions die with it."""

    services: Services
    subscriptions: SubscriptionService
    producer_ids: ProducerService
    txns: TxnSession
    write: Callable[[Chunks], Awaitable[None]]
    """Writes frames out on the connection (and waits for them to drain)."""
    on_fenced: Callable[[], None]
    """Called when a newer epoch takes the connection's transaction key: the connection closes."""
    producers: dict[int, Producer] = field(default_factory=dict)
    consumers: dict[int, Consumer] = field(default_factory=dict)
    principal: str | None = None  # who authenticated (Connect); None before, or with authentication off
    host: str | None = None  # the client's IP address, which ACLs for a host match
    closing: bool = False  # set by a handler: close once its answer is written
    _next_handle: int = field(default=1, init=False)

    def new_handle(self) -> int:
        handle, self._next_handle = self._next_handle, self._next_handle + 1
        return handle

    def producer(self, handle: int) -> Producer:
        return _owned(self.producers, handle, NotAllowed, "producer")

    def consumer(self, consumer_id: int) -> Consumer:
        return _owned(self.consumers, consumer_id, SubscriptionNotFound, "consumer")

    async def authorize(self, resource: ResourceType, name: str, operation: Operation) -> None:
        if not await self.services.security.authorize(self.principal, resource, name, operation, self.host):
            raise AuthorizationFailed(f"{self.principal} may not {operation} {resource} {name!r}")


def _owned(table: dict[int, T], key: int, missing: type[GatewayError], what: str) -> T:
    """The producer or consumer a request names, which must be this connection's."""
    found = table.get(key)
    if found is None:
        raise missing(f"no {what} {key} on this connection")
    return found


class Encoded(NamedTuple):
    """A whole answer frame (request id included) already encoded as chunks, records uncopied."""

    chunks: Chunks


Handler = Callable[[Session, pb.Request], Awaitable[pb.Response | Encoded | None]]
InOrderHandler = Callable[[Session, list[pb.Request]], Awaitable[list[pb.Response | Exception]]]

_BODIES = frozenset(f.name for f in pb.Request.DESCRIPTOR.oneofs_by_name["body"].fields)
_HANDLERS: dict[str, Handler] = {}
_IN_ORDER: dict[str, InOrderHandler] = {}
_BEFORE_CONNECT: set[str] = set()  # all that is served before authentication, when it is on


def _claim(kind: str, fn: Callable[..., object]) -> None:
    if kind not in _BODIES:
        raise ValueError(f"pb.Request has no body {kind!r}")
    existing = _HANDLERS.get(kind) or _IN_ORDER.get(kind)
    if existing is not None and existing is not fn:
        raise ValueError(f"{kind!r} already handled by {existing.__module__}.{existing.__name__}")


def handles(kind: str, *, before_connect: bool = False) -> Callable[[Handler], Handler]:
    """Register the decorated coroutine as the handler of requests whose body is `kind`;
    `before_connect` serves it to a client that has not authenticated yet."""

    def register(fn: Handler) -> Handler:
        _claim(kind, fn)
        _HANDLERS[kind] = fn
        if before_connect:
            _BEFORE_CONNECT.add(kind)
        return fn

    return register


def handles_in_order(kind: str) -> Callable[[InOrderHandler], InOrderHandler]:
    """Register the decorated coroutine as the handler of runs of `kind` requests, kept in arrival order."""

    def register(fn: InOrderHandler) -> InOrderHandler:
        _claim(kind, fn)
        _IN_ORDER[kind] = fn
        return fn

    return register


def lookup(kind: str | None) -> Handler | None:
    return _HANDLERS.get(kind or "")


def in_order(kind: str | None) -> InOrderHandler | None:
    return _IN_ORDER.get(kind or "")


def before_connect(kind: str | None) -> bool:
    return kind in _BEFORE_CONNECT


def load_handlers() -> None:
    """Import every module of `gateway.native` so their decorators run."""
    import gateway.native as package

    for mod in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{mod.name}")
