"""Chunked messages (Pulsar's PIP-37): a message larger than its topic's max.message.bytes is sent by
the producer as several records, each a slice of the value, and put together again by the consumer.

Each chunk carries what Pulsar's MessageMetadata carries for one, as record headers: the message's
uuid, the chunk's id (0 up), the number of chunks and the whole value's size; and the message's own
key and headers. All go to one partition in order. The consumer holds the chunks of each incomplete
message by uuid (chunks of several messages may interleave), hands out the whole once the last one
is in, named by every chunk's offset so one acknowledgement covers them all. As Pulsar's
ConsumerImpl does, it holds at most `max_pending` incomplete messages (past that the oldest is
given up: acknowledged with `auto_ack_oldest`, else negatively acknowledged, to come again), and
one incomplete for longer than `expire` seconds is acknowledged and forgotten
(expireTimeOfIncompleteChunkedMessage). Reassembly needs every chunk on the same consumer: an
exclusive or failover subscription, as Pulsar requires.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gateway.client.message import Message

UUID = "x-chunk-uuid"
CHUNK_ID = "x-chunk-id"
NUM_CHUNKS = "x-num-chunks"
TOTAL_SIZE = "x-total-chunk-size"
NAMES = (UUID, CHUNK_ID, NUM_CHUNKS, TOTAL_SIZE)

RESERVED = 1024
"""Bytes of a chunk's batch left for its header, record framing and chunk headers."""

Header = tuple[str, bytes | None]


def chunk_size(max_message_bytes: int, key: bytes | None, headers: list[Header]) -> int:
    """The largest slice of a value whose batch stays within `max_message_bytes`."""
    extra = len(key or b"") + sum(len(k) + len(v or b"") for k, v in headers)
    return max(1, max_message_bytes - RESERVED - extra)


def split(value: bytes, size: int) -> list[tuple[bytes, list[Header]]]:
    """The chunks of `value`, each with its chunk headers."""
    pieces = [value[i:i + size] for i in range(0, len(value), size)]
    ident = uuid.uuid4().hex.encode()
    n = str(len(pieces)).encode()
    total = str(len(value)).encode()
    return [(p, [(UUID, ident), (CHUNK_ID, str(i).encode()), (NUM_CHUNKS, n), (TOTAL_SIZE, total)])
            for i, p in enumerate(pieces)]


@dataclass(frozen=True)
class ChunkPolicy:
    """Pulsar's consumer settings for chunked messages: maxPendingChunkedMessage,
    autoAckOldestChunkedMessageOnQueueFull and expireTimeOfIncompleteChunkedMessage (seconds)."""

    max_pending: int = 10
    auto_ack_oldest: bool = False
    expire: float = 60.0


@dataclass
class _Pending:
    first: Message
    count: int
    parts: dict[int, Message] = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None


class Assembler:
    """One consumer's incomplete chunked messages. `give_up(message, ack)` is told of one given up
    on (named by the offsets of the chunks in), and whether to acknowledge or negatively
    acknowledge it."""

    def __init__(self, max_pending: int, auto_ack_oldest: bool, expire: float,
                 give_up: Callable[[Message, bool], None]) -> None:
        self.max_pending = max(1, max_pending)
        self.auto_ack_oldest = auto_ack_oldest
        self.expire = expire
        self._give_up = give_up
        self._pending: dict[bytes, _Pending] = {}  # in arrival order: the oldest first

    def add(self, msg: Message) -> Message | None:
        """The whole message once `msg` completes it; `msg` itself when it is no chunk."""
        ident = msg.headers.get(UUID)
        if ident is None:
            return msg
        try:
            chunk, count = int(msg.headers[CHUNK_ID] or b""), int(msg.headers[NUM_CHUNKS] or b"")
        except (KeyError, ValueError):
            return msg  # not a chunk this client wrote: handed out as it is
        pending = self._pending.get(ident)
        if pending is None:
            if len(self._pending) >= self.max_pending:
                self._drop(next(iter(self._pending)), self.auto_ack_oldest)
            pending = self._pending[ident] = _Pending(msg, count)
            if self.expire > 0:
                pending.timer = asyncio.get_running_loop().call_later(self.expire, self._drop, ident, True)
        pending.parts[chunk] = msg  # a chunk delivered again replaces itself
        if len(pending.parts) < pending.count:
            return None
        del self._pending[ident]
        if pending.timer is not None:
            pending.timer.cancel()
        parts = [pending.parts[i] for i in sorted(pending.parts)]
        first = parts[0]
        return replace(first, value=b"".join(p.value or b"" for p in parts),
                       headers={k: v for k, v in first.headers.items() if k not in NAMES},
                       offset=parts[-1].offset, chunk_offsets=tuple(p.offset for p in parts))

    def _drop(self, ident: bytes, ack: bool) -> None:
        pending = self._pending.pop(ident, None)
        if pending is None:
            return
        if pending.timer is not None:
            pending.timer.cancel()
        parts = list(pending.parts.values())
        self._give_up(replace(parts[-1], chunk_offsets=tuple(p.offset for p in parts)), ack)

    def clear(self) -> None:
        """Prefetched chunks are stale (the subscription moved or reconnected): forget them."""
        for pending in self._pending.values():
            if pending.timer is not None:
                pending.timer.cancel()
        self._pending.clear()
