"""Every Redis key name the gateway uses. All keys of a partition share the hash tag `{t:topic:p}`."""

from __future__ import annotations

TOPICS = "gw:topics"


def partition_tag(topic: str, partition: int) -> str:
    return f"{{t:{topic}:{partition}}}"


def log(topic: str, partition: int) -> str:
    return f"{partition_tag(topic, partition)}:log"


def meta(topic: str, partition: int) -> str:
    return f"{partition_tag(topic, partition)}:meta"


def producers(topic: str, partition: int) -> str:
    return f"{partition_tag(topic, partition)}:pids"


def subscription(topic: str, partition: int, name: str) -> str:
    """Hash of a subscription's durable position: `cursor` (all below acked) and mode."""
    return f"{partition_tag(topic, partition)}:sub:{name}"


def sub_acks(topic: str, partition: int, name: str) -> str:
    """Sorted set of offsets acked individually at or above the cursor (score = offset)."""
    return f"{partition_tag(topic, partition)}:acks:{name}"


def subscriptions_of(topic: str, partition: int) -> str:
    """Set of subscription names on a partition, so deleting a topic finds them."""
    return f"{partition_tag(topic, partition)}:subs"


def partition_keys_pattern(topic: str, partition: int) -> str:
    return f"{partition_tag(topic, partition)}:*"
