"""The admin face: HTTP API, Prometheus metrics, and the CLI over the same calls."""
