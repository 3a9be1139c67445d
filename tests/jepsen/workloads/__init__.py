"""History workloads for tests/jepsen's schedules: each a program run as
`python -m tests.jepsen.workloads.<name> --bootstrap H:P[,H:P] --history FILE --seconds N --seed S`
that writes a history (tests/jepsen/history.py) and ends with a final read of its topics, for
tests/jepsen/checker.py."""
