"""One native client connection: read frames, hand them to their handlers, write the answers.

Requests are answered in the order they are handled. `Send`s go through one queue per connection
and are appended in arrival order, as many per Redis round trip as have arrived, so a producer can
pipeline batches without its sequences ever overtaking each other. A request id of 0 asks for no
answer (flow permits). A malformed frame gets an error and the connection carries on; a frame over
`max_frame_bytes` gets an error and the connection is closed, as the stream cannot be trusted past it.

What one connection can make the gateway hold is bounded: sends waiting for their append take at
most `connection_buffer_bytes` (past it the connection is not read until they are answered), every
answer and delivery is written out (`drain`) before the next, deliveries follow the consumer's
permits, and a connection silent for `idle_timeout` is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from typing import TYPE_CHECKING

from gateway import telemetry
from gateway.domain.security import FAILED_AUTHENTICATION_DELAY
from gateway.errors import AuthenticationFailed, ErrorCode, GatewayError, InvalidRequest, NotAllowed
from gateway.formats.frames import FrameTooLarge, frame, parse, read_frame
from gateway.native import dispatch
from gateway.native.dispatch import Chunks, Encoded, Session
from gateway.native.transactions import TxnSession
from gateway.pb import gateway_pb2 as pb

if TYPE_CHECKING:
    from gateway.native.server import NativeServer

log = logging.getLogger(__name__)

_SEND_BATCH = 256  # sends appended per round trip at most


class Connection:
    """Framing, the read loop and the send queue of one client; its state is the `Session`."""

    def __init__(self, server: NativeServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.services = server.services
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.session = Session(self.services, server.subscriptions, server.producers, TxnSession(self.services),
                               write=self._write, on_fenced=self._fenced, host=peer[0] if peer else None)
        self._sends: asyncio.Queue[tuple[pb.Request, int, float]] = asyncio.Queue()  # request, size, arrival
        self.queued_bytes = 0  # of the frames in `_sends`
        self._room = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None

    async def serve(self) -> None:
        sender = self._sender = asyncio.create_task(self._send_loop())
        cfg = self.services.config
        session = self.session
        try:
            while True:
                try:
                    async with asyncio.timeout(cfg.idle_timeout or None):
                        payload = await read_frame(self.reader, cfg.max_frame_bytes)
                except FrameTooLarge as exc:
                    await self._write([_error(0, exc)])
                    return
                except TimeoutError:
                    log.info("native client %s sent nothing for %.0f s; closing",
                             self.writer.get_extra_info("peername"), cfg.idle_timeout)
                    return
                began = time.perf_counter()
                try:
                    req = parse(pb.Request(), payload)
                except InvalidRequest as exc:
                    unknown = _stats(None)
                    unknown.done(time.perf_counter() - began)
                    unknown.failed(exc.code.name)
                    await self._write([_error(0, exc)])
                    continue
                assert isinstance(req, pb.Request)
                kind = req.WhichOneof("body")
                if session.principal is None and self.services.security.enabled and not dispatch.before_connect(kind):
                    await self._write([_error(req.request_id, AuthenticationFailed("Connect with credentials first"))])
                    return
                if dispatch.in_order(kind) is not None:
                    await self._queue_send(req, len(payload))
                else:
                    await self._handle(req)
                if session.closing:
                    await asyncio.sleep(FAILED_AUTHENTICATION_DELAY)
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._sends.join(), 1.0)
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
            for consumer in list(session.consumers.values()):
                with contextlib.suppress(Exception):
                    await session.subscriptions.unsubscribe_consumer(consumer)
            session.consumers.clear()
            session.txns.disconnected()

    async def _queue_send(self, req: pb.Request, size: int) -> None:
        """Queue a send for the send loop; while the queue holds its byte budget, stop reading."""
        budget = self.services.config.connection_buffer_bytes
        while self.queued_bytes and self.queued_bytes + size > budget:
            if self._sender is None or self._sender.done():
                raise ConnectionError("the connection can no longer be written to")
            self._room.clear()
            await self._room.wait()
        self.queued_bytes += size
        self._sends.put_nowait((req, size, time.perf_counter()))

    async def _handle(self, req: pb.Request) -> None:
        kind = req.WhichOneof("body")
        handler = dispatch.lookup(kind)
        stats = _stats(kind)
        began = time.perf_counter()
        resp: pb.Response | Encoded | None
        try:
            if handler is None:
                raise InvalidRequest("unknown request type")
            resp = await handler(self.session, req)
        except Exception as exc:
            if not isinstance(exc, GatewayError):
                log.exception("native %s request failed", kind)
            resp = _error_response(exc)
            stats.failed(_code(exc).name)
        finally:
            stats.done(time.perf_counter() - began)
        if resp is None or not req.request_id:
            return
        if isinstance(resp, Encoded):
            await self._write(resp.chunks)
        else:
            resp.request_id = req.request_id
            await self._write([frame(resp)])

    async def _send_loop(self) -> None:
        while True:
            queued = [await self._sends.get()]
            while not self._sends.empty() and len(queued) < _SEND_BATCH:
                queued.append(self._sends.get_nowait())
            try:
                out = await self._in_order(queued)
                await self._write(out)
            except ConnectionError:
                return
            finally:
                self.queued_bytes -= sum(size for _, size, _ in queued)
                self._room.set()
                for _ in queued:
                    self._sends.task_done()

    async def _in_order(self, queued: list[tuple[pb.Request, int, float]]) -> Chunks:
        """Answers in arrival order: each run of one kind goes to its handler whole, after the runs
        before it, so a watermark never overtakes a message its producer sent earlier. A request's
        time in the metrics runs from its arrival (its wait in the queue included)."""
        out: Chunks = []
        for kind, run in itertools.groupby(queued, key=lambda q: q[0].WhichOneof("body")):
            handler = dispatch.in_order(kind)
            assert handler is not None
            items = list(run)
            stats = _stats(kind)
            answers = await handler(self.session, [req for req, _, _ in items])
            now = time.perf_counter()
            for (req, _, arrived), ans in zip(items, answers, strict=True):
                stats.done(now - arrived)
                if isinstance(ans, Exception):
                    stats.failed(_code(ans).name)
                    out.append(_error(req.request_id, ans))
                else:
                    ans.request_id = req.request_id
                    out.append(frame(ans))
        return out

    async def _write(self, chunks: Chunks) -> None:
        self.writer.writelines(chunks)
        await self.writer.drain()

    def _fenced(self) -> None:
        """A newer epoch took our transaction key: say so, and close at once."""
        txns = self.session.txns
        txns.fenced = True
        exc = NotAllowed(f"transaction key {txns.key!r}: epoch {txns.epoch} was fenced by a newer one")
        with contextlib.suppress(Exception):
            self.writer.write(_error(0, exc))
        self.reader.feed_eof()
        self.writer.close()


def _code(exc: BaseException) -> ErrorCode:
    return exc.code if isinstance(exc, GatewayError) else ErrorCode.UNKNOWN


def _error_response(exc: BaseException) -> pb.Response:
    return pb.Response(error=pb.Error(code=int(_code(exc)), message=str(exc)))


def _stats(kind: str | None) -> telemetry.ApiStats:
    """The metrics of a request kind (its body's name, e.g. send); a frame that is no request is "unknown"."""
    return telemetry.api("native", kind or "unknown")


def _error(request_id: int, exc: BaseException) -> bytes:
    resp = _error_response(exc)
    resp.request_id = request_id
    return frame(resp)
