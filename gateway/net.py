"""A TCP listener with staged shutdown and connection limits, shared by the Kafka and native faces."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, SupportsIndex

from gateway import telemetry

log = logging.getLogger(__name__)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def server_ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext | None:
    """The TLS context of every listener (TLS 1.2 at least), or None when no certificate is set."""
    if not cert_file:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file or None)
    return context


class FrameReader(asyncio.StreamReader):
    """A stream reader for length-prefixed frames, which only `readexactly`.

    asyncio's reader appends what arrives to one bytearray, which is copied whole each time it
    grows past its room; with a client's pipelined megabyte requests queued in it, that and copying
    each frame back out were most of a Produce's cost. Here arrivals are kept as they came: a frame
    that arrived as one piece is handed on as is, any other is copied once, joined into bytes of
    its size. Reading pauses past twice the limit and resumes at the limit, or while a frame waits
    for more, as asyncio's does. The reader's other methods are not for this one.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(limit=limit)
        self._max = limit
        self._pieces: deque[memoryview] = deque()
        self._held = 0  # bytes in `_pieces`
        self._reading: Any = None  # the transport, paused and resumed (uvloop's is not asyncio's class)
        self._stopped = False  # reading paused
        self._ended = False  # end of stream
        self._failed: BaseException | None = None
        self._arrived: asyncio.Future[None] | None = None
        # held, not asked for at each wait: Python 3.11's get_running_loop makes a getpid call (made by
        # a listener's protocol factory, on its loop)
        self._event_loop = asyncio.get_running_loop()

    def set_transport(self, transport: asyncio.BaseTransport) -> None:
        super().set_transport(transport)
        self._reading = transport

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:  # bytes from every transport
        piece = memoryview(data if isinstance(data, bytes) else bytes(data))  # kept: it must not be reused
        if not piece:
            return
        self._pieces.append(piece)
        self._held += len(piece)
        self._wake()
        if self._held > 2 * self._max and not self._stopped and self._reading is not None:
            try:
                self._reading.pause_reading()
            except NotImplementedError:  # a transport that cannot pause: everything is kept, as asyncio does
                self._reading = None
            else:
                self._stopped = True

    def feed_eof(self) -> None:
        super().feed_eof()
        self._ended = True
        self._wake()

    def set_exception(self, exc: Exception) -> None:
        super().set_exception(exc)
        self._failed = exc
        self._wake()

    def at_eof(self) -> bool:
        return self._ended and not self._held

    def _wake(self) -> None:
        if self._arrived is not None and not self._arrived.done():
            self._arrived.set_result(None)

    async def readexactly(self, n: int) -> bytes:
        if n == 0:  # an empty frame (a SASL token may be one): no piece to take it from
            return b""
        while self._held < n:
            if self._failed is not None:
                raise self._failed
            if self._ended:
                partial = b"".join(self._pieces)
                self._pieces.clear()
                self._held = 0
                raise asyncio.IncompleteReadError(partial, n)
            self._resume()  # more than the limit is wanted: wait for it with reading on
            self._arrived = self._event_loop.create_future()
            try:
                await self._arrived
            finally:
                self._arrived = None
        first = self._pieces[0]
        if len(first) == n and isinstance(first.obj, bytes) and len(first.obj) == n:
            self._pieces.popleft()
            out = first.obj  # arrived whole and alone: no copy
        else:
            parts: list[memoryview] = []
            got = 0
            while got < n:
                piece = self._pieces[0]
                take = min(len(piece), n - got)
                parts.append(piece[:take])
                got += take
                if take == len(piece):
                    self._pieces.popleft()
                else:
                    self._pieces[0] = piece[take:]
            out = parts[0].tobytes() if len(parts) == 1 else b"".join(parts)
        self._held -= n
        if self._held <= self._max:
            self._resume()
        return out

    def _resume(self) -> None:
        if self._stopped and self._reading is not None:
            self._stopped = False
            self._reading.resume_reading()


def keepalive(sock: socket.socket, idle: float) -> None:
    """TCP keepalive: after `idle` seconds of silence the kernel probes the peer three times, a third
    of `idle` apart, and resets a connection whose peer vanished (a half-open connection)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_KEEPIDLE"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, max(1, int(idle)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, int(idle / 3)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)


class TcpListener:
    """Runs `handler` per connection; `close` stops accepting, waits `grace`, then cancels.

    Beyond `max_connections` (0: no limit) a new connection is closed at once, so a flood of
    connections cannot take the memory the others need; `keepalive` (seconds, 0: off) lets the
    kernel find peers that vanished without closing.
    """

    def __init__(
        self, name: str, handler: Handler, *, limit: int = 1 << 20, max_connections: int = 0, keepalive: float = 0.0,
        reader: Callable[[int], asyncio.StreamReader] = asyncio.StreamReader,
    ) -> None:
        self.name = name
        self.reader = reader  # the kind of stream reader of each connection, made with `limit`
        self.handler = handler
        self.limit = limit
        self.max_connections = max_connections
        self.keepalive = keepalive
        self.refused = 0  # connections closed at once for being over the limit
        self.stats = telemetry.listener(name)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> TcpListener:
        loop = asyncio.get_running_loop()

        def connected() -> asyncio.StreamReaderProtocol:  # what asyncio.start_server builds, with `reader`'s kind
            return asyncio.StreamReaderProtocol(self.reader(self.limit), self._serve)

        self._server = await loop.create_server(connected, host, port, ssl=tls,
                                                ssl_handshake_timeout=10.0 if tls else None)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    @property
    def connections(self) -> int:
        return len(self._conns)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self.max_connections and len(self._conns) >= self.max_connections:
            self.refused += 1
            self.stats.refused += 1
            if self.refused == 1 or self.refused % 1000 == 0:
                log.warning("%s: %d connections open, the limit; refused %d so far",
                            self.name, len(self._conns), self.refused)
            writer.transport.abort()
            return
        self._conns.add(task)
        self.stats.accepted += 1
        self.stats.open += 1
        sock = writer.get_extra_info("socket")
        if sock is not None:
            # responses go out as several writes (header, then record bytes): without this, Nagle
            # holds the last one back until the client's delayed ACK, ~40 ms per response
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.keepalive > 0:
                    keepalive(sock, self.keepalive)
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s connection from %s failed", self.name, writer.get_extra_info("peername"))
        finally:
            self._conns.discard(task)
            self.stats.open -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def close(self, grace: float = 5.0) -> None:
        if self._server is None:
            return
        self._server.close()
        if self._conns:
            _, pending = await asyncio.wait(set(self._conns), timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        with contextlib.suppress(Exception):
            await self._server.wait_closed()
        self._server = None
