"""A TCP listener with staged shutdown, shared by the Kafka and native faces."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class TcpListener:
    """Runs `handler` per connection; `close` stops accepting, waits `grace`, then cancels."""

    def __init__(self, name: str, handler: Handler, *, limit: int = 1 << 20) -> None:
        self.name = name
        self.handler = handler
        self.limit = limit
        self.port = 0
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> TcpListener:
        self._server = await asyncio.start_server(self._serve, host, port, limit=self.limit)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    @property
    def connections(self) -> int:
        return len(self._conns)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            # responses go out as several writes (header, then record bytes): without this, Nagle
            # holds the last one back until the client's delayed ACK, ~40 ms per response
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
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
