"""What a consumer receives, and how a message is named."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from gateway.formats.records import iter_records

EVENT_TIME_HEADER = "x-event-time"
"""Record header carrying a message's event time (decimal epoch ms), the same bytes on both faces."""


@dataclass(frozen=True, order=True)
class MessageId:
    """A message's place in the log: ordered by topic, then partition, then offset."""

    topic: str
    partition: int
    offset: int
    chunks: tuple[int, ...] = field(default=(), compare=False)
    """A chunked message's: the offsets of all its chunks (`offset` is the last), acknowledged together."""

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}@{self.offset}"


@dataclass(frozen=True)
class Message:
    value: bytes | None
    key: bytes | None
    headers: dict[str, bytes | None]
    topic: str
    partition: int
    offset: int
    publish_time: int  # the record timestamp, epoch ms
    event_time: int | None = None  # epoch ms, when the producer gave one
    redelivery_count: int = 0
    late: bool = False  # its event time is before the watermark the gateway sent ahead of it
    chunk_offsets: tuple[int, ...] = ()  # a chunked message's chunks (gateway.client.chunks)
    decoded_value: Any = None  # the value read through the consumer's `schema` (gateway.client.schema)
    decoded_key: Any = None  # the key read through its `key_schema`
    # which subscribe of its consumer received it (a reconnect subscribes again): see
    # `Consumer.negative_acknowledge`
    consumer_epoch: int = field(default=0, compare=False, repr=False)
    message_id: MessageId = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "message_id", MessageId(self.topic, self.partition, self.offset, self.chunk_offsets))


def decode_batch(
    topic: str, partition: int, base_offset: int, batch: bytes, skip: Collection[int] = (), redelivery_count: int = 0,
    *, watermark: int | None = None, consumer_epoch: int = 0,
) -> list[Message]:
    """The messages of one stored batch, but those at the offsets in `skip`; the event-time header
    becomes `event_time`, and one before `watermark` marks the message late."""
    out = []
    for rec in iter_records(batch, base_offset):
        if rec.offset in skip:
            continue
        headers = dict(rec.headers)
        raw_event = headers.pop(EVENT_TIME_HEADER, None)
        event_time = int(raw_event) if raw_event else None
        late = event_time is not None and watermark is not None and event_time < watermark
        out.append(
            Message(rec.value, rec.key, headers, topic, partition, rec.offset, rec.timestamp,
                    event_time, redelivery_count, late, consumer_epoch=consumer_epoch)
        )
    return out
