"""Pulsar's batch receive policy: how much one `Consumer.batch_receive()` gathers before it returns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BatchReceivePolicy:
    """A batch is complete at `max_num_messages` messages or `max_num_bytes` bytes of values (a limit
    of 0 or less is none), or once `timeout` seconds have passed since the call, with whatever has
    arrived by then, none included (0: no timeout). Pulsar's defaults (its Python client's
    ConsumerBatchReceivePolicy): no message limit, 10 MiB, 100 ms. As Pulsar's `verify()`, at least
    one limit must be set. A message larger than `max_num_bytes` alone makes a batch of its own,
    rather than blocking the consumer."""

    max_num_messages: int = -1
    max_num_bytes: int = 10 * 1024 * 1024
    timeout: float = 0.1

    def __post_init__(self) -> None:
        if self.max_num_messages <= 0 and self.max_num_bytes <= 0 and self.timeout <= 0:
            raise ValueError("a batch receive policy needs max_num_messages, max_num_bytes or timeout")
        if self.timeout < 0:
            raise ValueError("timeout must not be negative")

    def room(self, messages: int, size: int, next_size: int) -> bool:
        """Whether a batch of `messages` totalling `size` bytes takes one more of `next_size`."""
        if 0 < self.max_num_messages <= messages:
            return False
        return not (messages and 0 < self.max_num_bytes < size + next_size)

    def full(self, messages: int, size: int) -> bool:
        return 0 < self.max_num_messages <= messages or 0 < self.max_num_bytes <= size
