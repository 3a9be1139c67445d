"""One Kafka client connection: read frames, dispatch them in order, write the answers.

Requests are handled one at a time in arrival order, as a Kafka broker does, so responses leave
in request order and a producer's batches are appended in the order it sent them. One overlap:
once a Produce has sent its appends to Redis (`RequestContext.sent`; Redis runs a connection's
commands in order), the next request is read and started while Redis works on the first, so a
producer with several requests in flight keeps Redis busy instead of waiting for each round trip.
A connection once throttled by a quota goes back to Kafka's one request at a time, so that each
throttle is known, and its mute kept, before the next request is read (KIP-219: Kafka's channel
stays muted until the response is sent and the throttle time has passed).
At most `MAX_PIPELINED` requests are read ahead of their answers, and answers are written out
(`drain`) in order, so a client that stops reading stops being read.
A frame over the size limit or one that cannot be parsed closes this connection only, and so does
silence: no request (or a frame left half-sent) for `idle_timeout`, kept by one timer per connection
(`_IdleTimer`) rather than a timeout around every frame's read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError
from kio.schema.index import api_key_map

from gateway import telemetry
from gateway.domain.services import Services
from gateway.errors import StorageUnavailable, log_failure
from gateway.kafka import codec, sasl
from gateway.kafka.api_versions import unsupported_version_body
from gateway.kafka.client_quotas import counts_time, throttled_response
from gateway.kafka.dispatch import ApiKey, ConnectionState, Encoded, RequestContext, lookup
from gateway.kafka.errors import MalformedRequest

log = logging.getLogger(__name__)
timing = logging.getLogger("gateway.kafka.timing")
"""Each request's handling time, at DEBUG (`--log-level DEBUG`): where a client's wait goes."""

_SIZE = struct.Struct(">i")
_MIN_FRAME = 10  # api key, version, correlation id, client id length
MAX_PIPELINED = 8  # requests read ahead of their answers

Chunks = list[bytes | memoryview] | None


class KafkaConnection:
    """Serves one client until it leaves, misbehaves, or the listener shuts down.

    On shutdown an idle connection (waiting for its next request) closes at once; a busy one
    finishes and answers the requests it has read first.
    """

    def __init__(self, services: Services, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.services = services
        self.reader = reader
        self.writer = writer
        sock = writer.get_extra_info("sockname")
        peer = writer.get_extra_info("peername")
        self.state = ConnectionState(str(peer), int(sock[1]) if sock else 0, host=peer[0] if peer else None)
        self.idle = True
        self.closing = False
        self._in_flight = 0
        self._silence: _IdleTimer | None = None  # while `run` runs, with an idle timeout configured

    def shutdown(self) -> None:
        self.closing = True
        if self.idle and not self._in_flight:
            self.writer.close()

    async def run(self) -> None:
        answers: asyncio.Queue[asyncio.Task[Chunks] | None] = asyncio.Queue()
        room = asyncio.Semaphore(MAX_PIPELINED)
        # the loop held, not asked for per request: Python 3.11's get_running_loop makes a getpid call
        loop = asyncio.get_running_loop()
        writing = loop.create_task(self._write_answers(answers, room))
        earlier: set[asyncio.Task[Chunks]] = set()  # requests started and not yet done
        if idle := self.services.config.idle_timeout:
            self._silence = _IdleTimer(loop, idle)
        try:
            while not self.closing and not self.state.close:
                bare = sasl.unframed(self.state)  # a SASL message after SaslHandshake v0, not a request
                if self.state.muted_until:
                    await self._muted()
                frame = await self._next_frame(bare)
                if frame is None:
                    return
                if not room.locked():
                    await room.acquire()  # returns at once
                elif not await _unless_done(room.acquire(), writing):
                    return  # the writer ended while all those answers were pending
                earlier = {t for t in earlier if not t.done()}  # a request answered waits for nothing
                if not bare and _api_key(frame) != ApiKey.PRODUCE and earlier:
                    # only produces overlap: anything else sees every earlier request done
                    if not await _unless_done(asyncio.wait(earlier), writing):
                        room.release()
                        return
                self._in_flight += 1
                started: asyncio.Future[None] = loop.create_future()
                task = loop.create_task(self._answer(frame, bare, started))
                answers.put_nowait(task)
                earlier.add(task)
                # on to the next request once this one is answered, or its appends are on their way
                if not await _either_unless(task, started, writing):
                    return
                if self.state.throttled and not task.done() and not await _unless_done(asyncio.wait({task}), writing):
                    return
                if task.done() and (task.cancelled() or task.exception() is not None):
                    return
        finally:
            if self._silence is not None:
                self._silence.stop()
            answers.put_nowait(None)  # the writer stops after the answers queued before
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writing  # anything else reaches the listener, which logs it
            while not answers.empty():
                left = answers.get_nowait()
                if left is not None:
                    left.add_done_callback(_retrieved)
            for close in list(self.state.closers.values()):
                try:
                    await close()
                except Exception as exc:
                    log_failure(log, f"kafka client {self.state.peer}: ending what its connection held", exc,
                                "left to its timeout")

    async def _muted(self) -> None:
        """A throttled client's channel stays muted for its throttle time, as Kafka's broker mutes it
        once the response is sent (KIP-219): nothing more is read from it until then."""
        began = time.monotonic()
        while (wait := self.state.muted_until - time.monotonic()) > 0:
            await asyncio.sleep(wait)  # a request answered meanwhile may have extended it
        self.state.muted_until = 0.0
        timing.debug("kafka client %s muted %.1f ms", self.state.peer, (time.monotonic() - began) * 1000)

    async def _next_frame(self, bare: bool) -> bytes | None:
        """The next request's bytes, or None when the connection should close."""
        peer = self.state.peer
        limit = self.services.config.max_frame_bytes
        silence = self._silence
        self.idle = True
        if silence is not None:
            silence.reading()
        try:
            prefix = await self.reader.readexactly(4)
            (size,) = _SIZE.unpack(prefix)
            if size < (0 if bare else _MIN_FRAME) or size > limit:
                log.warning("kafka client %s sent a frame of %d bytes (limit %d); closing", peer, size, limit)
                return None
            return await self.reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        except asyncio.CancelledError:
            if silence is None or not silence.expired():
                raise
            log.info("kafka client %s sent no request for %.0f s; closing", peer, silence.seconds)
            return None
        finally:
            self.idle = False
            if silence is not None:
                silence.done()

    async def _answer(self, frame: bytes, bare: bool, started: asyncio.Future[None]) -> Chunks:
        def sent() -> None:
            if not started.done():
                started.set_result(None)

        if bare:
            chunks = await sasl.unframed_step(self.state, frame)
            self.state.close = chunks is None
            return chunks
        return await handle(self.services, self.state, frame, sent=sent)

    async def _write_answers(self, answers: asyncio.Queue[asyncio.Task[Chunks] | None], room: asyncio.Semaphore) -> None:
        """Answers in request order; a malformed request or a handler's close ends the connection."""
        while (task := await answers.get()) is not None:
            try:
                chunks = await task
            except MalformedRequest as exc:
                log.warning("kafka client %s sent a malformed request (%s); closing", self.state.peer, exc)
                self.writer.close()
                return
            except BaseException:
                self.writer.close()  # the reader may be waiting for a request the client holds back
                raise
            finally:
                self._in_flight -= 1
                room.release()
            if chunks:
                try:
                    self.writer.writelines(chunks)
                    await self.writer.drain()
                except (ConnectionError, RuntimeError) as exc:  # uvloop: RuntimeError once its transport closed
                    log.debug("kafka client %s left before its answer was written (%s)", self.state.peer, exc)
                    self.writer.close()
                    return
            if self.state.close:
                await asyncio.sleep(sasl.closing_delay(self.state))
                self.writer.close()
                return
            if self.closing and self.idle and not self._in_flight:
                self.writer.close()  # shut down while this answer was pending: the reader waits no more


class _IdleTimer:
    """The idle timeout of one connection's reads (`KafkaConnection._next_frame`): one timer for the
    connection's life, moved on only when it fires, instead of `asyncio.timeout`'s timer made and
    cancelled around every frame. Firing `seconds` into a read, it cancels the reading task, as
    `asyncio.timeout` would, and the read takes that cancellation as the timeout (`expired`); a
    read begun since it was set is given its own `seconds` by a timer set again for it."""

    __slots__ = ("_cancelling", "_due", "_fired", "_loop", "_since", "_task", "_timer", "seconds")

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        task = asyncio.current_task(loop)
        assert task is not None
        self._loop, self._task, self.seconds = loop, task, seconds
        self._since: float | None = None  # when the read in progress began
        self._fired = False
        self._cancelling = 0  # the task's cancel requests before this timer's own
        self._due = loop.time() + seconds  # when the timer was set to fire
        self._timer = loop.call_at(self._due, self._check)

    def reading(self) -> None:
        self._since = self._loop.time()

    def done(self) -> None:
        self._since = None

    def _check(self) -> None:
        # a read begun `seconds` or more before the moment this timer was set for has timed out (judged
        # by that moment, not the clock now: a timer may fire a fraction of a millisecond early)
        since = self._since
        if since is not None and since + self.seconds <= self._due:
            self._fired = True
            self._cancelling = self._task.cancelling()
            self._task.cancel()
            return
        self._due = (self._loop.time() if since is None else since) + self.seconds
        self._timer = self._loop.call_at(self._due, self._check)

    def expired(self) -> bool:
        """Whether the cancellation that reached the read is this timer's alone (then withdrawn): the
        read timed out, as `asyncio.timeout` tells it (a cancellation from elsewhere stands)."""
        if not self._fired:
            return False
        self._fired = False
        return self._task.uncancel() <= self._cancelling

    def stop(self) -> None:
        self._timer.cancel()


async def _unless_done(step: Awaitable[Any], other: asyncio.Future[None]) -> bool:
    """Await `step`; False (and `step` cancelled) when `other` finishes first."""
    task = asyncio.ensure_future(step)
    await asyncio.wait({task, other}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        return True
    task.cancel()
    return False


async def _either_unless(a: asyncio.Future[Any], b: asyncio.Future[Any], other: asyncio.Future[None]) -> bool:
    """Wait for `a` or `b`; False when `other` finishes first. `_unless_done` of an `asyncio.wait`
    for the two, without the two tasks and the sets those take each request."""
    if a.done() or b.done():
        return True
    if other.done():
        return False
    waiter: asyncio.Future[None] = a.get_loop().create_future()

    def wake(_: asyncio.Future[Any]) -> None:
        if not waiter.done():
            waiter.set_result(None)

    for f in (a, b, other):
        f.add_done_callback(wake)
    try:
        await waiter
    finally:
        for f in (a, b, other):
            f.remove_done_callback(wake)
    return a.done() or b.done()


def _api_key(frame: bytes) -> int:
    return int.from_bytes(frame[:2], "big", signed=True)


def _retrieved(task: asyncio.Task[Chunks]) -> None:
    """An answer nobody will write (the client left): its outcome is of no further interest."""
    if not task.cancelled():
        task.exception()


async def handle(
    services: Services, state: ConnectionState, frame: bytes, *, sent: Callable[[], None] = lambda: None
) -> list[bytes | memoryview] | None:
    """The framed response to one request frame, or None when the request wants no answer; counted
    in the request metrics (by api, with the error codes its response carries, and its time)."""
    began = time.perf_counter()
    header = codec.read_header(frame)
    stats = _stats(header.api_key)
    # counting is for the debug line alone: the hot path pays for it only while that line is logged
    logged = timing.isEnabledFor(logging.DEBUG)
    with telemetry.counting_round_trips() if logged else contextlib.nullcontext([0]) as round_trips:
        try:
            chunks, errors = await _respond(services, state, frame, header, sent, began)
        except MalformedRequest:
            stats.failed("INVALID_REQUEST")
            raise
        except Exception:
            stats.failed("UNKNOWN_SERVER_ERROR")
            raise
        finally:
            took = time.perf_counter() - began
            stats.done(took)
            if logged:
                timing.debug("%s v%d correlation %d from %s %s: %.3f ms, %d Redis round trip%s",
                             api_key_map.get(header.api_key, header.api_key), header.api_version,
                             header.correlation_id, header.client_id, state.peer, took * 1000, round_trips[0],
                             "" if round_trips[0] == 1 else "s")
    for code in errors:
        stats.failed(_error_name(code))
    return chunks


async def _respond(
    services: Services, state: ConnectionState, frame: bytes, header: codec.RequestHeader, sent: Callable[[], None],
    began: float,
) -> tuple[list[bytes | memoryview] | None, Collection[KafkaError]]:
    """The framed response (None: no answer), and the error codes in it."""
    key, version = header.api_key, header.api_version
    if not sasl.permitted(services.security, state, key):
        log.warning("kafka client %s sent api %d before authenticating; closing", state.peer, key)
        state.close = True
        return None, (KafkaError.illegal_sasl_state,)
    reg = lookup(key, version)
    if reg is None:
        return _unsupported(header), (KafkaError.unsupported_version,)
    request = codec.decode_request(frame, header)
    ctx = RequestContext(services, state, key, version, header.correlation_id, header.client_id, len(frame), began,
                         sent=sent)
    try:
        response = await reg.handler(ctx, request)
    except StorageUnavailable as exc:
        return _storage_away(header, exc), (KafkaError.kafka_storage_error,)
    if response is not None and counts_time(ctx):
        response = await throttled_response(ctx, response)
    if response is None:
        return None, ()
    if isinstance(response, Encoded):
        body, errors = response.chunks, response.errors
    else:
        body, errors = [codec.encode_body(response)], codec.response_errors(response)
    return codec.frame_response(header.correlation_id, codec.response_header_flexible(key, version), body), errors


_STATS: dict[int, telemetry.ApiStats] = {}


def _stats(api_key: int) -> telemetry.ApiStats:
    """The metrics of an api key, by Kafka's name for it (ListOffsets); keys Kafka lacks share "Unknown"."""
    stats = _STATS.get(api_key)
    if stats is None:
        name = api_key_map.get(api_key)
        label = "".join(w.capitalize() for w in name.split("_")) if name else "Unknown"
        stats = _STATS[api_key] = telemetry.api("kafka", label)
    return stats


def _error_name(code: int) -> str:
    """Kafka's name of an error code (UNKNOWN_TOPIC_OR_PARTITION), or the number when it has none."""
    try:
        return KafkaError(code).name.upper()
    except ValueError:
        return str(code)


def _storage_away(header: codec.RequestHeader, exc: StorageUnavailable) -> list[bytes | memoryview]:
    """A handler that found Redis away answers KAFKA_STORAGE_ERROR in every error field: retriable
    in every Kafka client (Kafka 4.4's KafkaStorageException, a broker's log dir gone), so the
    client backs off and asks again; escaping, the error would close the connection instead."""
    key, version = header.api_key, header.api_version
    log.warning("kafka api %d from %s: %s; answered KAFKA_STORAGE_ERROR", key, header.client_id, exc)
    body = codec.error_response(key, version, KafkaError.kafka_storage_error) or [
        struct.pack(">h", KafkaError.kafka_storage_error)]
    return codec.frame_response(header.correlation_id, codec.response_header_flexible(key, version), body)


def _unsupported(header: codec.RequestHeader) -> list[bytes | memoryview]:
    """UNSUPPORTED_VERSION in the shape the client can read.

    ApiVersions answers in v0 with the supported list, so a client newer than us retries lower;
    other APIs get their own response with every error code set, or (for versions the protocol
    does not know) just the error code after the header.
    """
    key, version = header.api_key, header.api_version
    if key == ApiKey.API_VERSIONS:
        return codec.frame_response(header.correlation_id, False, unsupported_version_body())
    log.info("unsupported api %d v%d from %s", key, version, header.client_id)
    body = codec.error_response(key, version, KafkaError.unsupported_version)
    if body is None:
        return codec.frame_response(header.correlation_id, False, [struct.pack(">h", KafkaError.unsupported_version)])
    return codec.frame_response(header.correlation_id, codec.response_header_flexible(key, version), body)
