"""tests/jepsen/checker.py on small crafted histories: each rule fires on the history that breaks it,
naming the lines that show it, and a clean history passes. No lab, no servers: histories are files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.jepsen.checker import Expect, Result, check, check_file
from tests.jepsen.history import History, Type, read

Line = tuple[int | str, Type, str, Any]  # process, type, f, value
Rec = tuple[str, int, int, str]
STRICT = Expect()


def write(path: Path, lines: list[Line]) -> Path:
    with History(path) as h:
        for process, type, f, value in lines:
            h.write(process, type, f, value)
    return path


def run(tmp_path: Path, lines: list[Line], expect: Expect = STRICT) -> Result:
    return check(read(write(tmp_path / "h.jsonl", lines)), expect)


def send(v: str, p: int, o: int, process: int = 0, t: str = "out") -> list[Line]:
    return [(process, "invoke", "send", {"v": v, "t": t, "p": p}),
            (process, "ok", "send", {"v": v, "t": t, "p": p, "o": o})]


def unsure(v: str, p: int, type: Type = "info", error: str = "timed out") -> list[Line]:
    return [(0, "invoke", "send", {"v": v, "t": "out", "p": p}), (0, type, "send", {"v": v, "error": error})]


def final(*records: Rec, isolation: str = "read_committed") -> list[Line]:
    return [("final", "ok", "final", {"isolation": isolation, "records": [list(r) for r in records]})]


def poll(*records: Rec, isolation: str = "read_committed") -> list[Line]:
    return [(2, "ok", "poll", {"isolation": isolation, "records": [list(r) for r in records]})]


def txn(tid: str, outcome: Type, *sends: Rec, offsets: tuple[tuple[str, int, int], ...] = (),
        reads: tuple[Rec, ...] = ()) -> list[Line]:
    return [(1, "invoke", "txn", {"id": tid, "abort": outcome == "fail",
                                  "sends": [[t, p, None, v] for t, p, _, v in sends]}),
            (1, outcome, "txn", {"id": tid, "sends": [list(s) for s in sends], "group": "g",
                                 "reads": [list(r) for r in reads],
                                 "offsets": [list(o) for o in offsets]})]


def commit(*offsets: tuple[str, int, int]) -> list[Line]:
    return [(2, "ok", "commit", {"group": "g", "offsets": [list(o) for o in offsets]})]


IN = ("in", 0, 0, "i")
CLEAN: list[Line] = [
    *send("i", 0, 0, process=3, t="in"),
    *send("a", 0, 0), *send("b", 0, 1), *send("c", 1, 0),
    *unsure("d", 1),  # may or may not be there: here it is
    *txn("t1", "ok", ("out", 2, 0, "x"), ("out", 3, 0, "y"), offsets=(("in", 0, 1),), reads=(IN,)),
    *txn("t2", "fail", ("out", 2, 1, "z")),
    *poll(("out", 0, 0, "a"), ("out", 0, 1, "b")),
    (2, "ok", "seek", {"positions": [["out", 0, 0]]}),
    *poll(("out", 0, 0, "a"), ("out", 2, 0, "x")),
    *commit(("in", 0, 7)),
    *final(IN, ("out", 0, 0, "a"), ("out", 0, 1, "b"), ("out", 1, 0, "c"), ("out", 1, 1, "d"),
           ("out", 2, 0, "x"), ("out", 3, 0, "y")),
]


def test_a_clean_history_passes(tmp_path: Path) -> None:
    result = run(tmp_path, CLEAN)
    assert result.anomalies == [] and result.expected == []


def test_check_file_gives_one_line_per_anomaly(tmp_path: Path) -> None:
    path = write(tmp_path / "h.jsonl", [*send("a", 0, 0), *final()])
    assert check_file(path) == ["lost-write: value a acknowledged at ('out', 0, 0), not in the final read "
                                "(history lines 1, 2)"]


def test_a_torn_last_line_is_dropped(tmp_path: Path) -> None:
    path = write(tmp_path / "h.jsonl", CLEAN)
    with path.open("a") as f:
        f.write('{"process": 0, "type": "ok", "f": "se')  # where a SIGKILL cut the writer
    assert check(read(path)).anomalies == []


A, B = ("out", 0, 0, "a"), ("out", 0, 1, "b")
X = ("out", 1, 0, "x")


def assign(process: int, *partitions: tuple[str, int]) -> list[Line]:
    return [(process, "ok", "assign", {"group": "g", "partitions": [list(tp) for tp in partitions]})]


def member_poll(process: int, *records: Rec) -> list[Line]:
    return [(process, "ok", "poll", {"isolation": "read_committed", "records": [list(r) for r in records]})]


def share_poll(member: str, since: float, returned: float, *records: Rec, accepted: float | None = None,
               count: int = 1) -> list[Line]:
    lines: list[Line] = [(member, "invoke", "share-poll", None),
                         (member, "ok", "share-poll", {"records": [list(r) for r in records], "lock_ms": 30000,
                                                       "counts": [count] * len(records), "since": since,
                                                       "returned": returned})]
    if accepted is not None:
        lines.append((member, "invoke", "share-ack", {"records": [list(r) for r in records], "at": accepted}))
    return lines


def native(f: str, *records: Rec) -> list[Line]:
    return [("subscription", "ok", f, {"records": [list(r) for r in records]})]


@pytest.mark.parametrize(("kind", "lines"), [
    ("no-final-read", send("a", 0, 0)),
    ("final-read-failed", [*send("a", 0, 0), ("final", "fail", "final", {"error": "gone"})]),
    ("unavailable", [*unsure("a", 0), *final()]),
    ("lost-write", [*send("a", 0, 0), *send("b", 0, 1), *final(A)]),
    ("lost-write", [(0, "invoke", "send", {"v": "a", "t": "out", "p": 0}),
                    (0, "ok", "send", {"v": "a", "t": "out", "p": 0, "o": None}), *final()]),  # offset untold
    ("moved-write", [*send("a", 0, 0), *final(("out", 1, 0, "a"))]),
    ("duplicate", [*send("a", 0, 0), *final(A, ("out", 0, 1, "a"))]),
    ("offset-reused", [*send("a", 0, 0), *send("b", 0, 0, process=1), *final(A, B)]),
    ("nonmonotonic-send", [*send("a", 0, 1), *send("b", 0, 0), *final(("out", 0, 0, "b"), ("out", 0, 1, "a"))]),
    ("nonmonotonic-read", [*send("a", 0, 0), *send("b", 0, 1), *poll(B), *poll(A), *final(A, B)]),
    ("poll-inconsistent", [*send("a", 0, 0), *poll(A, ("out", 0, 1, "q")), *final(A)]),
    ("aborted-read", [*send("a", 0, 0), *txn("t", "fail", X), *final(A, X)]),
    ("uncommitted-read", [*poll(X), *txn("t", "ok", X), *final(X)]),
    ("txn-not-atomic", [*send("a", 0, 0), *txn("t", "info", X, ("out", 2, 0, "y")), *final(A, X)]),
    ("offset-regressed", [*send("a", 0, 0), *commit(("in", 0, 5)), *txn("t", "ok", X, offsets=(("in", 0, 3),)),
                          *final(A, X)]),
    ("reprocessed", [*send("i", 0, 0, t="in"), *txn("t1", "ok", X, offsets=(("in", 0, 1),), reads=(IN,)),
                     *txn("t2", "ok", ("out", 2, 0, "y"), offsets=(("in", 0, 1),), reads=(IN,)),
                     *final(IN, X, ("out", 2, 0, "y"))]),
    ("unprocessed", [*send("i", 0, 0, t="in"), *send("j", 0, 1, t="in"),
                     *txn("t1", "ok", X, offsets=(("in", 0, 2),), reads=(IN,)), *final(IN, ("in", 0, 1, "j"), X)]),
    ("stuck", [*send("a", 0, 0), (1, "info", "stuck", {"call": "a transaction's step", "seconds": 180}),
               *final(A)]),
    ("client-fatal", [*send("a", 0, 0), (0, "info", "fatal", {"error": "out of order sequence"}), *final(A)]),
    ("failed-write-read", [*send("a", 0, 0), *unsure("b", 0, "fail", "too large"), *final(A, B)]),
    ("resumed-behind-commit", [*send("a", 0, 0), *send("b", 0, 1), *member_poll(1, A, B), *commit(("out", 0, 2)),
                               *assign(2, ("out", 0)), *member_poll(2, B), *final(A, B)]),
    ("acked-redelivered", [*send("a", 0, 0), *native("receive", A), *native("ack", A), *native("receive", A),
                           *final(A)]),
    ("share-double-delivery", [*send("a", 0, 0), *share_poll("m0", 0.0, 0.1, A),
                               *share_poll("m1", 1.0, 1.1, A, count=2), *final(A)]),
    ("share-double-delivery", [*send("a", 0, 0), *share_poll("m0", 0.0, 0.1, A),  # one delivery, two members
                               *share_poll("m1", 40.0, 40.1, A), *final(A)]),
    ("poll-inconsistent", [*send("a", 0, 0), *share_poll("m0", 0.0, 0.1, ("out", 0, 0, "q")), *final(A)]),
])
def test_each_rule_fires_and_names_its_lines(tmp_path: Path, kind: str, lines: list[Line]) -> None:
    result = run(tmp_path, lines)
    assert kind in result.kinds(), result.anomalies
    assert all(a.ops for a in result.anomalies if a.kind not in ("no-final-read", "unavailable"))


def test_a_committed_transactions_missing_record_is_a_lost_write(tmp_path: Path) -> None:
    assert run(tmp_path, [*txn("t", "ok", X, ("out", 2, 0, "y")), *final(X)]).kinds() == {"lost-write"}


def test_an_unsure_transaction_all_or_nothing_passes(tmp_path: Path) -> None:
    seen, unseen = [X, ("out", 2, 0, "y")], [("out", 1, 1, "z"), ("out", 2, 1, "w")]
    lines = [*send("a", 0, 0), *txn("seen", "info", *seen), *txn("unseen", "info", *unseen), *final(A, *seen)]
    assert run(tmp_path, lines).anomalies == []


def test_read_uncommitted_may_see_aborted_and_uncommitted_records(tmp_path: Path) -> None:
    lines = [*send("a", 0, 0), *poll(X, isolation="read_uncommitted"), *txn("t", "fail", X),
             *final(A, X, isolation="read_uncommitted")]
    assert run(tmp_path, lines).anomalies == []


def test_acks1_loss_is_expected_when_declared_and_nothing_else_is(tmp_path: Path) -> None:
    # a failed-over primary lost b; c then took its offset; d was written twice by a retry
    lines = [*send("a", 0, 0), *send("b", 0, 1), *send("c", 0, 1), *send("d", 0, 2),
             *final(A, ("out", 0, 1, "c"), ("out", 0, 2, "d"), ("out", 0, 3, "d"))]
    weak = {"lost-write", "offset-reused", "nonmonotonic-send", "duplicate"}
    assert run(tmp_path, lines).kinds() == weak
    both = run(tmp_path, lines, Expect(loss=True, duplicates=True))
    assert both.anomalies == [] and {a.kind for a in both.expected} == weak
    assert run(tmp_path, lines, Expect(loss=True)).kinds() == {"duplicate"}


def test_an_aborted_record_read_uncommitted_need_not_be_in_a_read_committed_log(tmp_path: Path) -> None:
    lines = [*send("a", 0, 0), *poll(X, isolation="read_uncommitted"), *txn("t", "fail", X), *final(A)]
    assert run(tmp_path, lines).anomalies == []


def test_a_member_may_reread_what_its_group_did_not_commit(tmp_path: Path) -> None:
    lines = [*send("a", 0, 0), *send("b", 0, 1), *member_poll(1, A, B), *commit(("out", 0, 1)),
             *assign(2, ("out", 0)), *member_poll(2, B), *assign(1, ("out", 0)), *member_poll(1, B), *final(A, B)]
    assert run(tmp_path, lines).anomalies == []


def test_a_share_record_may_go_to_another_member_once_accepted_or_its_lock_ran_out(tmp_path: Path) -> None:
    # m1's poll began after m0 accepted it; m2's after m1's lock (taken after 0.3) surely ran out at 30.3;
    # m3's began before m2's returned, so which came first is unknown (delivery counts apart)
    lines = [*send("a", 0, 0), *share_poll("m0", 0.0, 0.1, A, accepted=0.2), *share_poll("m1", 0.3, 0.4, A, count=2),
             *share_poll("m2", 30.5, 30.6, A, count=3), *share_poll("m3", 30.55, 30.7, A, count=4), *final(A)]
    assert run(tmp_path, lines).anomalies == []


def test_an_unacknowledged_native_delivery_may_come_again(tmp_path: Path) -> None:
    lines = [*send("a", 0, 0), *send("b", 0, 1), *native("receive", A, B), *native("ack", A), *native("receive", B),
             *final(A, B)]
    assert run(tmp_path, lines).anomalies == []
