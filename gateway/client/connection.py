"""One TCP connection to a gateway: requests matched to responses, pushed frames routed to consumers."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from ssl import SSLContext
from typing import Protocol

from gateway.client.errors import ConnectionLost
from gateway.errors import GatewayError, Timeout, error_for
from gateway.formats.frames import PROTOCOL_VERSION, frame, parse, read_frame
from gateway.pb import gateway_pb2 as pb

log = logging.getLogger(__name__)

_MAX_INCOMING = 1 << 31  # the server bounds what it sends by what consumers asked for


@dataclass(frozen=True)
class Credentials:
    """What Connect presents to a gateway with authentication on: a user and password, or a token."""

    username: str = ""
    password: str = field(default="", repr=False)
    token: str = field(default="", repr=False)


class PushReceiver(Protocol):
    """A consumer as the connection sees it."""

    def on_messages(self, messages: pb.Messages) -> None: ...

    def on_reset(self) -> None: ...

    def on_watermark(self, update: pb.WatermarkUpdate) -> None: ...

    def on_closed(self, exc: GatewayError) -> None: ...


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: float) -> None:
        self.reader = reader
        self.writer = writer
        self.timeout = timeout
        self.max_frame_bytes = 0
        self.epoch = -1  # the transaction key's epoch this connection holds
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[pb.Response]] = {}
        self._receivers: dict[int, PushReceiver] = {}
        self._closed: GatewayError | None = None
        self.on_lost: Callable[[GatewayError], None] | None = None  # told first, before the consumers
        self._task = asyncio.create_task(self._read_loop(), name="gateway client reader")
        self._keepalive: asyncio.Task[None] | None = None
        self._last_sent = asyncio.get_running_loop().time()

    @classmethod
    async def open(
        cls, host: str, port: int, *, timeout: float, client_name: str = "", transaction_key: str = "",
        epoch: int = -1, incarnation: str = "", credentials: Credentials | None = None,
        ssl: SSLContext | None = None,
    ) -> Connection:
        """Connect (over TLS with `ssl`) and say hello, with `credentials` when given; with a
        transaction key, present `epoch` (the last one given, -1 at first) and learn the new one.
        NotAllowed when a newer epoch holds the key, AuthenticationFailed for refused credentials."""
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=ssl, server_hostname=host if ssl else None), timeout
            )
        except (OSError, TimeoutError) as exc:
            raise ConnectionLost(f"cannot connect to {host}:{port}: {exc}") from exc
        conn = cls(reader, writer, timeout)
        creds = credentials or Credentials()
        hello = pb.Connect(
            client_name=client_name, protocol_version=PROTOCOL_VERSION, transaction_key=transaction_key, epoch=epoch,
            incarnation=incarnation,
            username=creds.username, password=creds.password, token=creds.token,
        )
        try:
            resp = await conn.request(pb.Request(connect=hello))
        except BaseException:
            await conn.close()
            raise
        conn.max_frame_bytes = resp.connected.max_frame_bytes
        conn.epoch = resp.connected.epoch if transaction_key else -1
        if resp.connected.idle_timeout_ms:
            conn._keepalive = asyncio.create_task(conn._keep_alive(resp.connected.idle_timeout_ms / 3000))
        return conn

    async def _keep_alive(self, interval: float) -> None:
        """The gateway closes connections that stay silent: ping (unanswered) after `interval` of quiet."""
        loop = asyncio.get_running_loop()
        while self._closed is None:
            quiet = loop.time() - self._last_sent
            if quiet >= interval:
                self.send_nowait(pb.Request(ping=pb.Ping()))
                quiet = 0.0
            await asyncio.sleep(interval - quiet)

    @property
    def closed(self) -> bool:
        return self._closed is not None

    async def request(self, req: pb.Request, timeout: float | None = None) -> pb.Response:
        """Send and wait for the answer; an error answer is raised as its typed GatewayError."""
        if self._closed is not None:
            raise self._closed
        rid = next(self._ids)
        req.request_id = rid
        fut: asyncio.Future[pb.Response] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            self.writer.write(frame(req))
            self._last_sent = asyncio.get_running_loop().time()
            await self.writer.drain()
            resp = await asyncio.wait_for(fut, timeout or self.timeout)
        except TimeoutError:
            raise Timeout(f"no answer to {req.WhichOneof('body')} in time") from None
        except ConnectionError as exc:
            raise ConnectionLost(str(exc)) from exc
        finally:
            self._pending.pop(rid, None)
        if resp.WhichOneof("body") == "error":
            raise error_for(resp.error.code, resp.error.message)
        return resp

    def send_nowait(self, req: pb.Request) -> None:
        """A request that expects no answer (flow permits)."""
        if self._closed is None:
            req.request_id = 0
            self.writer.write(frame(req))
            self._last_sent = asyncio.get_running_loop().time()

    def add_receiver(self, consumer_id: int, receiver: PushReceiver) -> None:
        self._receivers[consumer_id] = receiver

    def remove_receiver(self, consumer_id: int) -> None:
        self._receivers.pop(consumer_id, None)

    async def _read_loop(self) -> None:
        reason: GatewayError = ConnectionLost("the gateway closed the connection")
        try:
            while True:
                resp = parse(pb.Response(), await read_frame(self.reader, _MAX_INCOMING))
                assert isinstance(resp, pb.Response)
                if resp.request_id:
                    fut = self._pending.get(resp.request_id)
                    if fut is not None and not fut.done():
                        fut.set_result(resp)
                    continue
                kind = resp.WhichOneof("body")
                if kind == "messages":
                    receiver = self._receivers.get(resp.messages.consumer_id)
                    if receiver is not None:
                        receiver.on_messages(resp.messages)
                elif kind == "consumer_reset":
                    receiver = self._receivers.get(resp.consumer_reset.consumer_id)
                    if receiver is not None:
                        receiver.on_reset()
                elif kind == "watermark_update":
                    receiver = self._receivers.get(resp.watermark_update.consumer_id)
                    if receiver is not None:
                        receiver.on_watermark(resp.watermark_update)
                elif kind == "error":
                    log.warning("gateway reported: %s", resp.error.message)
        except (asyncio.IncompleteReadError, ConnectionError, GatewayError) as exc:
            if isinstance(exc, GatewayError) and not isinstance(exc, ConnectionLost):
                reason = ConnectionLost(f"unreadable frame from the gateway: {exc}")
        except asyncio.CancelledError:
            reason = ConnectionLost("the connection was closed")
            raise
        finally:
            self._fail(reason)

    def _fail(self, reason: GatewayError) -> None:
        if self._closed is not None:
            return
        self._closed = reason
        if self._keepalive is not None:
            self._keepalive.cancel()
        if self.on_lost is not None:
            self.on_lost(reason)
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(reason)
        for receiver in list(self._receivers.values()):
            receiver.on_closed(reason)
        self._receivers.clear()
        self.writer.close()

    async def close(self) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()
