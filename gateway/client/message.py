"""What a consumer receives, and how a message is named."""

from __future__ import annotations

from dataclasses import dataclass, field

EVENT_TIME_HEADER = "x-event-time"
"""Record header carrying a message's event time (decimal epoch ms), the same bytes on both faces."""


@dataclass(frozen=True, order=True)
class MessageId:
    """A message's place in the log: ordered by topic, then partition, then offset."""

    topic: str
    partition: int
    offset: int

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
    message_id: MessageId = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "message_id", MessageId(self.topic, self.partition, self.offset))
