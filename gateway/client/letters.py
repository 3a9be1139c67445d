"""Pulsar's DeadLetterPolicy for native consumers; the gateway does the copying (see
gateway/domain/dead_letter.py for the topic and property names, Pulsar's own)."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.pb import gateway_pb2 as pb

MAX_RECONSUMETIMES = 16
"""Pulsar's RetryMessageUtil.MAX_RECONSUMETIMES: the policy a consumer with retry_enable and no
policy of its own gets."""


@dataclass(frozen=True)
class DeadLetterPolicy:
    """After `max_redeliver_count` redeliveries (negative acknowledgements, ack timeouts) or
    reconsumes, a message goes to `dead_letter_topic` (default `<topic>-<subscription>-DLQ`);
    `Consumer.reconsume_later` sends one to `retry_letter_topic` (default
    `<topic>-<subscription>-RETRY`)."""

    max_redeliver_count: int
    dead_letter_topic: str | None = None
    retry_letter_topic: str | None = None

    def __post_init__(self) -> None:
        if self.max_redeliver_count < 1:
            raise ValueError("max_redeliver_count must be at least 1")

    def resolved(self, topic: str, subscription: str) -> pb.DeadLetterPolicy:
        """The policy with its topics named, so the retry topic's consumer sends to the same ones."""
        return pb.DeadLetterPolicy(
            max_redeliver_count=self.max_redeliver_count,
            dead_letter_topic=self.dead_letter_topic or f"{topic}-{subscription}-DLQ",
            retry_letter_topic=self.retry_letter_topic or f"{topic}-{subscription}-RETRY",
        )
