"""One Kafka client connection: read frames, dispatch them in order, write the answers.

Requests are handled one at a time in arrival order, as a Kafka broker does, so responses leave
in request order and a producer's pipelined batches are appended in the order it sent them;
pipelining still works because the kernel and the stream buffer hold the requests waiting behind.
A frame over the size limit or one that cannot be parsed closes this connection only, and so does
silence: no request (or a frame left half-sent) for `idle_timeout`. A response is written out
(`drain`) before the next request is read, so a client that stops reading stops being read: what
the gateway buffers for it is one response at most.
"""

from __future__ import annotations

import asyncio
import logging
import struct

from kio.schema.errors import ErrorCode as KafkaError

from gateway.kafka import codec, sasl
from gateway.kafka.api_versions import unsupported_version_body
from gateway.kafka.dispatch import ApiKey, ConnectionState, Encoded, RequestContext, lookup
from gateway.services import Services

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_MIN_FRAME = 10  # api key, version, correlation id, client id length


class KafkaConnection:
    """Serves one client until it leaves, misbehaves, or the listener shuts down.

    On shutdown an idle connection (waiting for its next request) closes at once; a busy one
    finishes and answers its current request first.
    """

    def __init__(self, services: Services, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.services = services
        self.reader = reader
        self.writer = writer
        sock = writer.get_extra_info("sockname")
        self.state = ConnectionState(str(writer.get_extra_info("peername")), int(sock[1]) if sock else 0)
        self.idle = True
        self.closing = False

    def shutdown(self) -> None:
        self.closing = True
        if self.idle:
            self.writer.close()

    async def run(self) -> None:
        peer = self.state.peer
        limit = self.services.config.max_frame_bytes
        idle = self.services.config.idle_timeout or None
        while not self.closing:
            self.idle = True
            try:
                bare = sasl.unframed(self.state)  # a SASL message after SaslHandshake v0, not a request
                async with asyncio.timeout(idle):
                    prefix = await self.reader.readexactly(4)
                    (size,) = _SIZE.unpack(prefix)
                    if size < (0 if bare else _MIN_FRAME) or size > limit:
                        log.warning("kafka client %s sent a frame of %d bytes (limit %d); closing", peer, size, limit)
                        return
                    frame = await self.reader.readexactly(size)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            except TimeoutError:
                log.info("kafka client %s sent no request for %.0f s; closing", peer, idle)
                return
            self.idle = False
            try:
                if bare:
                    chunks = await sasl.unframed_step(self.state, frame)
                    self.state.close = chunks is None
                else:
                    chunks = await handle(self.services, self.state, frame)
            except codec.MalformedRequest as exc:
                log.warning("kafka client %s sent a malformed request (%s); closing", peer, exc)
                return
            if chunks:
                self.writer.writelines(chunks)
                await self.writer.drain()
            if self.state.close:
                await asyncio.sleep(sasl.closing_delay(self.state))
                return


async def handle(services: Services, state: ConnectionState, frame: bytes) -> list[bytes | memoryview] | None:
    """The framed response to one request frame, or None when the request wants no answer."""
    header = codec.read_header(frame)
    key, version = header.api_key, header.api_version
    if not sasl.permitted(services.security, state, key):
        log.warning("kafka client %s sent api %d before authenticating; closing", state.peer, key)
        state.close = True
        return None
    reg = lookup(key, version)
    if reg is None:
        return _unsupported(header)
    request = codec.decode_request(frame, header)
    ctx = RequestContext(services, state, key, version, header.correlation_id, header.client_id)
    response = await reg.handler(ctx, request)
    if response is None:
        return None
    body = response.chunks if isinstance(response, Encoded) else [codec.encode_body(response)]
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
