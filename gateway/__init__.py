"""A Kafka-compatible gateway on Redis Streams."""

__version__ = "0.1.0"
