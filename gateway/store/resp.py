"""Reading large stream entries from Redis without copying them.

Through redis-py a megabyte stream entry is copied four times before the gateway holds it: into the
transport's buffer, the stream reader's, hiredis's, and the bytes object hiredis builds. A Kafka
fetch then only sends those bytes on. Here the kernel writes a large bulk string straight into the
bytearray that the fetch response hands back to the kernel, and small replies are parsed from one
reusable buffer. For replies of many small elements hiredis's C parser is faster than this one, so
callers take this path only for large entries.

One connection per Redis node shared by every caller: Redis answers a connection's commands in
order, so pipelines in flight are answered in the order they were sent, and commands sent one
after another are run in that order, without waiting for each other's replies (appends rely on
it). RESP2. A read that meets anything unexpected (a lost connection, an error reply such as a
cluster's MOVED) answers None, and the caller reads through redis-py, which knows how to retry
and redirect.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import ssl
from collections import deque
from typing import Any

from gateway.store.connection import UNAVAILABLE, SentinelRedis
from gateway.telemetry import redis_round_trip

log = logging.getLogger(__name__)

BIG = 32 * 1024  # bulk strings at least this long are received into their own buffer
_SCRATCH = 256 * 1024
_CRLF = b"\r\n"
_RETRY_AFTER = 1.0  # seconds before a node that refused a connection is tried again


# CPython's own constructor, which leaves the bytes as the allocator gave them: `bytearray(n)` zeroes
# all n, and a large bulk string's buffer is then overwritten whole by the kernel (perf over a 1 KB
# Kafka consume put a sixth of the gateway's CPU in that memset)
_bytearray_unset = ctypes.pythonapi.PyByteArray_FromStringAndSize
_bytearray_unset.restype = ctypes.py_object
_bytearray_unset.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)


def unset_bytearray(n: int) -> bytearray:
    """A bytearray of `n` bytes not yet written, for the kernel to fill before anyone reads it."""
    out: bytearray = _bytearray_unset(None, n)
    return out


class RespError(Exception):
    """An error reply (-ERR ..., -MOVED ...)."""


class RespConnection(asyncio.BufferedProtocol):
    def __init__(self) -> None:
        self._buf = bytearray(_SCRATCH)
        self._start = 0  # where parsing resumes
        self._end = 0  # where received bytes end
        self._big: bytearray | None = None  # a large bulk string being received in place
        self._big_fill = 0
        self._skip = 0  # bytes of CRLF still to pass after a large bulk string
        self._stack: list[tuple[list[Any], int]] = []  # arrays being filled: (items, expected)
        self._waiting: deque[tuple[asyncio.Future[list[Any]], int, list[Any]]] = deque()
        self._transport: asyncio.Transport | None = None
        self._lost: BaseException | None = None
        self._corked: list[bytes | bytearray | memoryview] | None = None  # commands to write this turn
        self.address: tuple[str, int] | None = None  # the node's, as `DirectConnections` opened it

    # -- the caller's side ----------------------------------------------------------------------

    @property
    def usable(self) -> bool:
        return self._transport is not None and self._lost is None and not self._transport.is_closing()

    def pipeline(self, commands: list[tuple[Any, ...]]) -> asyncio.Future[list[Any]]:
        """Send commands; the future gets their replies, an error reply as a RespError in its place."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[list[Any]] = loop.create_future()
        if not self.usable:
            fut.set_exception(ConnectionError(f"redis connection lost: {self._lost}"))
            return fut
        assert self._transport is not None
        redis_round_trip()
        if self._corked is None:
            # written at the end of this turn of the event loop, with whatever else callers send by
            # then: one system call for all of them (in order, so Redis runs them as sent)
            self._corked = encode(commands)
            loop.call_soon(self._flush)
        else:
            self._corked += encode(commands)
        self._waiting.append((fut, len(commands), []))
        return fut

    def _flush(self) -> None:
        chunks, self._corked = self._corked, None
        if chunks and self.usable:
            assert self._transport is not None
            self._transport.writelines(chunks)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """Closed at once, what is left unsent dropped: requests waiting fail now, not when a stopped
        node takes its bytes."""
        if self._transport is not None:
            self._transport.abort()

    # -- the protocol's side --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's class

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = exc or ConnectionError("closed")
        while self._waiting:
            fut, _, _ = self._waiting.popleft()
            if not fut.done():
                fut.set_exception(ConnectionError(f"redis connection lost: {self._lost}"))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return memoryview(self._big)[self._big_fill:]
        if self._end == len(self._buf):
            if self._start:
                rest = self._end - self._start
                self._buf[:rest] = self._buf[self._start:self._end]
                self._start, self._end = 0, rest
            else:  # one unfinished element fills the buffer (a bulk string just under BIG)
                self._buf.extend(bytes(len(self._buf)))
        return memoryview(self._buf)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        try:
            if self._big is not None:
                self._big_fill += nbytes
                if self._big_fill < len(self._big):
                    return
                value, self._big = self._big, None
                self._skip = 2
                self._value(value)
            else:
                self._end += nbytes
            self._parse()
        except (ValueError, IndexError) as exc:  # not RESP, or a reply nobody asked for
            log.warning("unexpected reply on a direct read connection (%s); closing it", exc)
            self._lost = exc
            assert self._transport is not None
            self._transport.abort()

    def _parse(self) -> None:
        buf = self._buf
        while True:
            if self._skip:
                take = min(self._skip, self._end - self._start)
                self._start += take
                self._skip -= take
                if self._skip:
                    return
            if self._start == self._end:
                self._start = self._end = 0
                return
            eol = buf.find(_CRLF, self._start, self._end)
            if eol < 0:
                return
            kind = buf[self._start]
            line = bytes(buf[self._start + 1:eol])
            body = eol + 2
            if kind == 0x24:  # $ bulk string
                n = int(line)
                if n < 0:
                    self._start = body
                    self._value(None)
                    continue
                have = self._end - body
                if have >= n + 2:  # all here already: one copy out of the buffer
                    self._start = body + n + 2
                    self._value(buf[body:body + n] if n >= BIG else bytes(buf[body:body + n]))
                    continue
                if n < BIG:
                    return  # the rest arrives in this buffer
                big = unset_bytearray(n)  # filled by the kernel before it is handed on
                take = min(have, n)
                big[:take] = buf[body:body + take]
                self._start = self._end = 0
                if take < n:
                    self._big, self._big_fill = big, take
                    return
                self._skip = 2 - (have - n)  # the body is here, not all of its CRLF
                self._value(big)
                continue
            self._start = body
            if kind == 0x2A:  # * array
                n = int(line)
                if n < 0:
                    self._value(None)
                elif n == 0:
                    self._value([])
                else:
                    self._stack.append(([], n))
            elif kind == 0x3A:  # : integer
                self._value(int(line))
            elif kind == 0x2B:  # + simple string
                self._value(line)
            elif kind == 0x2D:  # - error
                self._value(RespError(line.decode(errors="replace")))
            else:
                raise ValueError(f"unexpected RESP type byte {kind:#x}")

    def _value(self, value: Any) -> None:
        stack = self._stack
        while stack:
            items, expected = stack[-1]
            items.append(value)
            if len(items) < expected:
                return
            stack.pop()
            value = items
        fut, count, replies = self._waiting[0]
        replies.append(value)
        if len(replies) == count:
            self._waiting.popleft()
            if not fut.done():
                fut.set_result(replies)


def encode(commands: list[tuple[Any, ...]]) -> list[bytes | bytearray | memoryview]:
    """RESP for `commands`, as chunks: a large argument (a batch) is a chunk of its own, uncopied."""
    chunks: list[bytes | bytearray | memoryview] = []
    small = bytearray()
    for command in commands:
        small += b"*%d\r\n" % len(command)
        for arg in command:
            kind = type(arg)  # the usual kinds first: this runs for every argument of every call
            b = arg.encode() if kind is str else b"%d" % arg if kind is int else arg \
                if isinstance(arg, bytes | bytearray | memoryview) else str(arg).encode()
            if len(b) >= BIG:
                chunks += [bytes(small + b"$%d\r\n" % len(b)), b]
                small = bytearray(b"\r\n")
            else:
                small += b"$%d\r\n" % len(b)
                small += b
                small += b"\r\n"
    chunks.append(bytes(small))
    return chunks


class DirectConnections:
    """One `RespConnection` per Redis node, opened on first use and again after a loss, with the
    address, credentials and TLS settings of the redis-py client it stands beside. `preload`
    scripts are loaded on each new connection, so EVALSHA on it finds them.

    Behind Sentinel the address is the primary's as the Sentinels name it when a connection is
    opened, and a new connection that finds a replica there (a stale answer amid a failover) is
    refused. A connection is dropped, and the primary asked for again, when its node answers
    READONLY (demoted) or when the redis-py client has found the primary elsewhere."""

    def __init__(self, redis: Any, *, name: str = "gateway-direct", preload: tuple[str, ...] = ()) -> None:
        self._redis = redis
        self._name = name
        self._preload = preload
        self._cluster = hasattr(redis, "get_node_from_key")
        if self._cluster:
            kwargs = dict(redis.nodes_manager.connection_kwargs)
            tls = bool(kwargs.get("ssl"))
        else:
            kwargs = dict(redis.connection_pool.connection_kwargs)
            tls = "SSL" in redis.connection_pool.connection_class.__name__
        self._username: str | None = kwargs.get("username")
        self._password: str | None = kwargs.get("password")
        self._db = int(kwargs.get("db") or 0)
        self._path: str | None = kwargs.get("path")  # a unix socket
        self._addr = (str(kwargs.get("host", "localhost")), int(kwargs.get("port") or 6379))
        self._sentinel = redis if isinstance(redis, SentinelRedis) else None
        self._seen: tuple[str, int] | None = None  # where the redis-py client last found the primary
        self._tls = _tls_context(kwargs) if tls else None
        self._conns: dict[tuple[str, int], RespConnection] = {}
        self._opening: dict[tuple[str, int], asyncio.Task[RespConnection]] = {}
        self._refused_until: dict[tuple[str, int], float] = {}
        self._relocating: asyncio.Future[None] | None = None

    async def pipeline(self, key: str, commands: list[tuple[Any, ...]]) -> list[Any] | None:
        """The replies of commands on `key`'s node, or None when this path cannot serve them now."""
        conn = await self.connection(key)
        if conn is None:
            return None
        try:
            replies = await conn.pipeline(commands)
        except OSError:
            return None
        if any(isinstance(r, RespError) for r in replies):
            if any(isinstance(r, RespError) and str(r).startswith("READONLY") for r in replies):
                conn.close()  # its node was demoted: the next connection finds the primary
            return None
        return replies

    async def connection(self, key: str) -> RespConnection | None:
        """The usable connection to `key`'s node, or None when none can be had now."""
        if (conn := self.ready(key)) is not None:
            return conn
        if self._sentinel is not None:
            if not await self._find_primary():
                return None
            return await self._open(self._addr)
        return await self._open(self.address(key))

    def ready(self, key: str) -> RespConnection | None:
        """The open, usable connection to `key`'s node, or None (`connection` then opens one): on a hot
        path, `ready(key) or await connection(key)` spares a coroutine on every call."""
        conn = self._conns.get(self.address(key))
        if self._sentinel is not None and conn is not None and self._moved():
            conn.close()
        return conn if conn is not None and conn.usable else None

    def _moved(self) -> bool:
        """The redis-py client, on a new connection of its own, met the primary somewhere else (once
        per change it saw: a stale answer it got is not followed back and forth)."""
        assert self._sentinel is not None
        seen = self._sentinel.primary_seen()
        if seen == self._seen:
            return False
        self._seen = seen
        return seen is not None and seen != self._addr

    async def _find_primary(self) -> bool:
        """Ask the Sentinels where the primary is now; False when none can say."""
        assert self._sentinel is not None
        try:
            self._addr = await self._sentinel.discover_primary()
        except UNAVAILABLE as exc:
            log.info("no primary from the Sentinels now (%s); reading through redis-py", exc)
            return False
        return True

    def address(self, key: str) -> tuple[str, int]:
        """The node that holds `key`."""
        if self._cluster:
            node = self._redis.get_node_from_key(key)
            return str(node.host), int(node.port)
        return self._addr

    async def _open(self, addr: tuple[str, int]) -> RespConnection | None:
        loop = asyncio.get_running_loop()
        if loop.time() < self._refused_until.get(addr, 0.0):
            return None
        task = self._opening.get(addr)
        if task is None:
            task = asyncio.ensure_future(self._connect(addr))
            self._opening[addr] = task
            task.add_done_callback(lambda _: self._opening.pop(addr, None))
        try:
            conn = await asyncio.shield(task)
        except (OSError, TimeoutError, RespError) as exc:
            log.info("direct read connection to %s:%d failed (%s); reading through redis-py", *addr, exc)
            self._refused_until[addr] = loop.time() + _RETRY_AFTER
            self.relocate()  # a cluster's node gone: its slots may have a new owner by now
            return None
        self._conns[addr] = conn
        return conn

    async def on_node(self, addr: tuple[str, int], commands: list[tuple[Any, ...]],
                      timeout: float = 2.0) -> list[Any]:
        """`commands`' replies from the node at `addr`, whatever its role (a replica's own settings:
        `promotion.py`), on a connection opened for them with this client's credentials and TLS and
        closed after. OSError, TimeoutError or the node's RespError when it cannot be had."""
        conn = await self._connect(addr, primary=False)
        try:
            async with asyncio.timeout(timeout):
                return await conn.pipeline(commands)
        finally:
            conn.close()

    async def _connect(self, addr: tuple[str, int], *, primary: bool = True) -> RespConnection:
        """A connection to `addr`: with `primary`, one that has the preloaded scripts and, behind
        Sentinel, is refused unless its node is a primary."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(2.0):
            if self._path:
                _, conn = await loop.create_unix_connection(RespConnection, self._path)
            else:
                _, conn = await loop.create_connection(
                    RespConnection, *addr, ssl=self._tls, server_hostname=addr[0] if self._tls else None)
            hello: list[tuple[Any, ...]] = []
            if self._password is not None:
                hello.append(("AUTH", self._username, self._password) if self._username
                             else ("AUTH", self._password))
            if self._db:
                hello.append(("SELECT", self._db))
            hello.append(("CLIENT", "SETNAME", self._name))  # for CLIENT LIST readers
            checked = primary and self._sentinel is not None
            hello += [("SCRIPT", "LOAD", source) for source in self._preload] if primary else []
            if checked:
                hello.append(("ROLE",))
            conn.address = addr
            replies = await conn.pipeline(hello)
            if checked and not isinstance(replies[-1], RespError) and replies[-1][0] != b"master":
                replies.append(RespError(f"{addr[0]}:{addr[1]} is no primary now"))
            for reply in replies:
                if isinstance(reply, RespError):
                    conn.close()
                    raise reply
        return conn

    def relocate(self) -> None:
        """A slot moved: have the cluster client learn the new layout, for the next call's node."""
        if self._cluster and (self._relocating is None or self._relocating.done()):
            self._relocating = asyncio.ensure_future(self._redis.nodes_manager.initialize())
            self._relocating.add_done_callback(lambda t: t.cancelled() or t.exception())

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    def follow(self, primary: tuple[str, int]) -> None:
        """Behind Sentinel: every connection to another node than `primary` aborted (their requests
        fail now, not when a stopped node takes its bytes), and `primary` used from now on
        (`SentinelRedis.follow_primary`)."""
        for addr in [a for a in self._conns if a != primary]:
            self._conns.pop(addr).abort()
        self._addr = primary


def _tls_context(kwargs: dict[str, Any]) -> ssl.SSLContext:
    """The TLS settings redis-py takes from a `rediss://` URL's query, applied the same way."""
    ctx = ssl.create_default_context(cafile=kwargs.get("ssl_ca_certs"), capath=kwargs.get("ssl_ca_path"))
    reqs = kwargs.get("ssl_cert_reqs", "required")
    if isinstance(reqs, str):
        reqs = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}[reqs]
    ctx.check_hostname = bool(kwargs.get("ssl_check_hostname", reqs != ssl.CERT_NONE)) and reqs != ssl.CERT_NONE
    ctx.verify_mode = reqs
    if kwargs.get("ssl_certfile"):
        ctx.load_cert_chain(kwargs["ssl_certfile"], kwargs.get("ssl_keyfile"), kwargs.get("ssl_password"))
    return ctx
