"""Jepsen-style tests: gateways, Redis and clients in network namespaces, faults between them, and a
checker of the histories the clients record (issue 33)."""
