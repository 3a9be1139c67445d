"""The Kafka-protocol facade: existing Kafka clients work unchanged."""
