"""The history checker: Kafka's guarantees over a workload's history (tests/jepsen/history.py), each
broken one named with the lines of the operations that show it, in the spirit of Jepsen's Kafka checker.

A record is `[topic, partition, offset, value]`, every value unique in a workload. The operations:

- `send`   invoke `{"v", "t", "p"}`; ok `{"v", "t", "p", "o"}` (acknowledged there; `o` null: acknowledged
           at an offset the client was not told); fail/info `{"v", "error"}`
- `txn`    invoke when commit or abort is asked, `{"id", "abort", "sends": [records, offset null]}`;
           ok (committed) `{"id", "sends": [records], "reads": [records consumed], "group",
           "offsets": [[t, p, o]]}`; fail (aborted); info
- `poll`   ok `{"isolation": "read_committed"|"read_uncommitted", "records": [...]}`, in the order returned
- `seek`   ok `{"positions": [[t, p, o]]}`: this process's next poll of each starts at `o` (a rewind)
- `commit` ok `{"group", "offsets": [[t, p, o]]}`: a group's offsets committed
- `final`  ok `{"isolation", "records"}`, the whole log read once everything is healed; fail `{"error"}`
- `stuck`  info `{"call", "seconds"}`: a client call that never returned, abandoned by the workload
- `fatal`  info `{"error"}`: the client gave up for good (librdkafka's idempotent producer on an
           out-of-order sequence it cannot reconcile, which a log that keeps what it acknowledged never causes)
- `assign` ok `{"group", "partitions": [[t, p]]}`: partitions given to this group member; its next poll
           of each starts where the group committed (not below any commit acknowledged before)
- `receive` ok `{"records"}`: a native subscription's deliveries (redelivered after a reconnection
           unless acknowledged); `ack` ok `{"records"}`: their acknowledgement, durable once ok
- `share-poll` ok `{"records", "counts", "lock_ms", "since", "returned"}`: a share-group member's
           acquisitions, each record's delivery count, and the client's monotonic seconds: `since` the
           invocation of the member's previous poll (the client may acquire a batch one poll ahead)
           and when this one returned; `share-ack` invoke `{"records", "at"}`: its acceptances

What weak settings cannot promise is declared with `Expect` (acks=1: loss over a failover, duplicates
from retries) and then reported as expected, never as an anomaly.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.jepsen.history import Op, read

Where = tuple[str, int, int]  # topic, partition, offset
TP = tuple[str, int]


@dataclass(frozen=True)
class Expect:
    """What the settings under test cannot promise: `loss` of acknowledged records (acks=1 over a
    failover, their offsets then taken by later ones) and `duplicates` (retries without idempotence)."""

    loss: bool = False
    duplicates: bool = False


@dataclass(frozen=True)
class Anomaly:
    kind: str
    detail: str
    ops: tuple[int, ...]  # line numbers of the operations that show it

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail} (history lines {', '.join(map(str, self.ops))})"


@dataclass
class Result:
    anomalies: list[Anomaly] = field(default_factory=list)
    expected: list[Anomaly] = field(default_factory=list)  # what Expect allowed

    def kinds(self) -> set[str]:
        return {a.kind for a in self.anomalies}


@dataclass
class _Txn:
    id: str
    outcome: str  # ok, fail, info, or "" when only its request was seen
    requested: int  # the line of its commit or abort request
    completed: int
    sends: list[tuple[str, int, int | None, str]]
    reads: list[tuple[str, int, int | None, str]] = field(default_factory=list)


def _records(raw: Iterable[list[Any]]) -> list[tuple[str, int, int | None, str]]:
    return [(str(t), int(p), None if o is None else int(o), str(v)) for t, p, o, v in raw]


class _Checker:
    def __init__(self, ops: list[Op], expect: Expect) -> None:
        self.ops, self.expect, self.result = ops, expect, Result()
        self.final: Op | None = None
        self.log: dict[Where, str] = {}
        self.at: dict[str, list[Where]] = defaultdict(list)  # value -> where the final read has it
        self.txns: dict[str, _Txn] = {}
        self.by_value: dict[str, _Txn] = {}
        self.somewhere: dict[str, int] = {}  # value -> line: acknowledged at an offset untold

    def flag(self, kind: str, detail: str, *ops: int, expected: bool = False) -> None:
        (self.result.expected if expected else self.result.anomalies).append(Anomaly(kind, detail, ops))

    def run(self) -> Result:
        for op in self.ops:
            if op.f == "stuck":
                self.flag("stuck", f"process {op.process}: {op.value['call']} not back after {op.value['seconds']} s",
                          op.index)
            elif op.f == "fatal":
                self.flag("client-fatal", f"process {op.process}: {op.value['error']}", op.index)
        self._final()
        self._transactions()
        acked = self._acknowledged()
        if self.final is None:
            return self.result
        self._lost(acked)
        self._duplicates()
        self._reused(acked)
        self._sends_in_order()
        self._reads()
        self._atomic()
        self._offsets_forward()
        self._resumed()
        self._received()
        self._shared()
        self._exactly_once()
        self._definite_failures()
        return self.result

    def _final(self) -> None:
        finals = [o for o in self.ops if o.f == "final" and o.type != "invoke"]
        if not finals:
            self.flag("no-final-read", "the history ends without its final read")
            return
        last = finals[-1]
        if last.type != "ok":
            self.flag("final-read-failed", f"the log could not be read back: {last.value}", last.index)
            return
        self.final = last
        for t, p, o, v in _records(last.value["records"]):
            assert o is not None
            self.log[(t, p, o)] = v
            self.at[v].append((t, p, o))

    def _transactions(self) -> None:
        for op in self.ops:
            if op.f != "txn":
                continue
            tid = str(op.value["id"])
            txn = self.txns.setdefault(tid, _Txn(tid, "", op.index, op.index, []))
            if op.type == "invoke":
                txn.requested = op.index
            else:
                txn.outcome, txn.completed = op.type, op.index
            sends = _records(op.value.get("sends", []))
            if sends and (op.type == "ok" or not txn.sends or any(o is not None for *_, o, _v in sends)):
                txn.sends = sends
            txn.reads = _records(op.value.get("reads", [])) or txn.reads
        for txn in self.txns.values():
            for *_, v in txn.sends:
                self.by_value[v] = txn

    def _acknowledged(self) -> dict[str, tuple[Where, int]]:
        """Each acknowledged value: where it was acknowledged, and the line saying so."""
        acked: dict[str, tuple[Where, int]] = {}
        for op in self.ops:
            if op.f == "send" and op.type == "ok" and op.value["o"] is not None:
                acked[str(op.value["v"])] = ((str(op.value["t"]), int(op.value["p"]), int(op.value["o"])), op.index)
            elif op.f == "send" and op.type == "ok":
                self.somewhere[str(op.value["v"])] = op.index
        for txn in self.txns.values():
            if txn.outcome == "ok":
                for t, p, o, v in txn.sends:
                    if o is not None:
                        acked[v] = ((t, p, o), txn.completed)
        if not acked and not self.somewhere:
            self.flag("unavailable", "nothing was acknowledged in the whole run")
        return acked

    def _lost(self, acked: dict[str, tuple[Where, int]]) -> None:
        assert self.final is not None
        for v, (where, line) in acked.items():
            if v not in self.at:
                self.flag("lost-write", f"value {v} acknowledged at {where}, not in the final read",
                          line, self.final.index, expected=self.expect.loss)
            elif where not in self.at[v]:
                self.flag("moved-write", f"value {v} acknowledged at {where}, read at {self.at[v]}",
                          line, self.final.index, expected=self.expect.loss)
        for v, line in self.somewhere.items():
            if v not in self.at:
                self.flag("lost-write", f"value {v} acknowledged (its offset untold), not in the final read",
                          line, self.final.index, expected=self.expect.loss)
        for txn in self.txns.values():  # a committed transaction's record whose offset never came back
            if txn.outcome == "ok":
                for t, p, o, v in txn.sends:
                    if o is None and v not in self.at:
                        self.flag("lost-write", f"value {v} of committed transaction {txn.id} to {(t, p)}, "
                                  "not in the final read", txn.completed, self.final.index,
                                  expected=self.expect.loss)

    def _duplicates(self) -> None:
        assert self.final is not None
        for v, where in self.at.items():
            if len(where) > 1:
                self.flag("duplicate", f"value {v} in the log {len(where)} times, at {where}", self.final.index,
                          expected=self.expect.duplicates)

    def _reused(self, acked: dict[str, tuple[Where, int]]) -> None:
        """One offset, two values: between what was acknowledged, polled and finally read."""
        assert self.final is not None
        seen: dict[Where, dict[str, int]] = defaultdict(dict)
        for v, (where, line) in acked.items():
            seen[where].setdefault(v, line)
        for op in self._polls():
            for t, p, o, v in _records(op.value["records"]):
                assert o is not None
                seen[(t, p, o)].setdefault(v, op.index)
        for where, v in self.log.items():
            seen[where].setdefault(v, self.final.index)
        for where, values in seen.items():
            if len(values) > 1:
                lost = any(v not in self.at for v in values)  # a lost record's offset taken by a later one
                self.flag("offset-reused", f"{where} holds {sorted(values)}", *sorted(set(values.values())),
                          expected=self.expect.loss and lost)

    def _polls(self) -> list[Op]:
        return [o for o in self.ops if o.f in ("poll", "receive", "share-poll") and o.type == "ok"]

    def _consistent(self, op: Op, t: str, p: int, o: int, v: str) -> None:
        """A polled record is where the final read has it (an uncommitted transaction's records are not
        in a read_committed final read, so one of those is let be)."""
        assert self.final is not None
        final, txn = self.final, self.by_value.get(v)
        if v in self.at and (t, p, o) not in self.at[v]:
            self.flag("poll-inconsistent", f"value {v} polled at {(t, p, o)}, finally at {self.at[v]}",
                      op.index, final.index)
        elif v not in self.at and not (txn and txn.outcome != "ok"
                                       and final.value.get("isolation") == "read_committed"):
            self.flag("poll-inconsistent", f"value {v} polled at {(t, p, o)}, not in the final read",
                      op.index, final.index, expected=self.expect.loss)

    def _sends_in_order(self) -> None:
        """One producer's acknowledged sends to a partition keep the order it sent them in."""
        asked: dict[str, tuple[int | str, int]] = {}
        last: dict[tuple[int | str, str, int], tuple[int, str, int]] = {}
        for op in self.ops:
            if op.f == "send" and op.type == "invoke":
                asked[str(op.value["v"])] = (op.process, op.index)
        oks = sorted(((asked[str(o.value["v"])][1], o) for o in self.ops if o.f == "send" and o.type == "ok"
                      and o.value["o"] is not None and str(o.value["v"]) in asked), key=lambda e: e[0])
        for _, op in oks:
            key = (op.process, str(op.value["t"]), int(op.value["p"]))
            o, v = int(op.value["o"]), str(op.value["v"])
            if key in last and last[key][0] >= o:
                prev_o, prev_v, prev_line = last[key]
                self.flag("nonmonotonic-send", f"process {op.process} sent {prev_v} before {v} to {key[1:]}, "
                          f"acknowledged at offsets {prev_o} and {o}", prev_line, op.index,
                          expected=self.expect.loss and prev_v not in self.at)  # its offset taken after a loss
            last[key] = (o, v, op.index)

    def _reads(self) -> None:
        """Polls in offset order per partition (since the process's last seek), at the offsets the final
        read has their values, and under read_committed nothing aborted or not yet committed."""
        assert self.final is not None
        last: dict[tuple[int | str, str, int], int] = {}
        final = self.final
        for op in [*[o for o in self.ops if o.f in ("poll", "seek", "assign") and o.type == "ok"], final]:
            if op.f == "seek":
                for t, p, o in op.value["positions"]:
                    last[(op.process, str(t), int(p))] = int(o) - 1
                continue
            if op.f == "assign":  # where it resumes is _resumed's to check
                for t, p in op.value["partitions"]:
                    last.pop((op.process, str(t), int(p)), None)
                continue
            committed_only = op.value.get("isolation") == "read_committed"
            process = "final" if op is final else op.process
            for t, p, o, v in _records(op.value["records"]):
                assert o is not None
                key = (process, t, p)
                if key in last and o <= last[key]:
                    self.flag("nonmonotonic-read", f"{(t, p)} read at offset {o} after {last[key]}", op.index)
                last[key] = o
                txn = self.by_value.get(v)
                if op is not final:
                    self._consistent(op, t, p, o, v)
                if committed_only and txn is not None:
                    if txn.outcome == "fail":
                        self.flag("aborted-read", f"value {v} of aborted transaction {txn.id} read at {(t, p, o)}",
                                  txn.completed, op.index)
                    elif op.index < txn.requested:
                        self.flag("uncommitted-read", f"value {v} of transaction {txn.id} read at {(t, p, o)} "
                                  "before its commit was asked", op.index, txn.requested)

    def _atomic(self) -> None:
        """Under read_committed, a transaction's records are in the log all together or not at all."""
        assert self.final is not None
        if self.final.value.get("isolation") != "read_committed":
            return
        for txn in self.txns.values():
            seen = [v for *_, v in txn.sends if v in self.at]
            if seen and len(seen) < len(txn.sends) and txn.outcome != "ok":  # a committed one's gaps are lost
                self.flag("txn-not-atomic", f"transaction {txn.id} ({txn.outcome or 'unfinished'}): "
                          f"{len(seen)} of its {len(txn.sends)} records read", txn.completed, self.final.index)

    def _offsets_forward(self) -> None:
        """A group's committed offset of a partition never goes back (no resets in these workloads)."""
        last: dict[tuple[str, str, int], tuple[int, int]] = {}
        for op in self.ops:
            if op.type != "ok" or op.f not in ("commit", "txn") or not op.value.get("offsets"):
                continue
            for t, p, o in op.value["offsets"]:
                key = (str(op.value["group"]), str(t), int(p))
                if key in last and int(o) < last[key][0]:
                    self.flag("offset-regressed", f"group {key[0]} committed {key[1:]} at {o} after {last[key][0]}",
                              last[key][1], op.index)
                last[key] = (int(o), op.index)

    def _resumed(self) -> None:
        """A member given a partition resumes at or after every offset its group committed (ok) before the
        assignment: a poll below it means a committed offset went back (Kafka's OffsetFetch after a
        rebalance; KIP-848's reconciliation as the classic protocol's)."""
        committed: dict[tuple[str, str, int], tuple[int, int]] = {}
        resuming: dict[tuple[int | str, str, int], tuple[int, int] | None] = {}  # process's partition -> floor
        for op in self.ops:
            if op.type != "ok":
                continue
            if op.f in ("commit", "txn") and op.value.get("offsets"):
                for t, p, o in op.value["offsets"]:
                    key = (str(op.value["group"]), str(t), int(p))
                    if int(o) > committed.get(key, (-1, 0))[0]:
                        committed[key] = (int(o), op.index)
            elif op.f == "assign":
                for t, p in op.value["partitions"]:
                    resuming[(op.process, str(t), int(p))] = committed.get((str(op.value["group"]), str(t), int(p)))
            elif op.f == "poll":
                for t, p, o, v in _records(op.value["records"]):
                    assert o is not None
                    floor = resuming.pop((op.process, t, p), None)
                    if floor is not None and o < floor[0]:
                        self.flag("resumed-behind-commit", f"process {op.process} resumed {(t, p)} at offset {o} "
                                  f"({v}) after its group committed {floor[0]}", floor[1], op.index)

    def _received(self) -> None:
        """A native subscription's deliveries are where the log has them, and one whose acknowledgement
        came back is never delivered again (after a reconnection, only unacknowledged ones are)."""
        acked: dict[tuple[int | str, Where], int] = {}
        for op in self.ops:
            if op.type != "ok" or op.f not in ("receive", "ack"):
                continue
            for t, p, o, v in _records(op.value["records"]):
                assert o is not None
                if op.f == "ack":
                    acked.setdefault((op.process, (t, p, o)), op.index)
                    continue
                self._consistent(op, t, p, o, v)
                if (op.process, (t, p, o)) in acked:
                    self.flag("acked-redelivered", f"{(t, p, o)} ({v}) delivered to process {op.process} again "
                              "after its acknowledgement came back", acked[(op.process, (t, p, o))], op.index)

    def _shared(self) -> None:
        """Share groups (KIP-932): each acquired record is where the log has it, and no record goes to two
        members under live locks. Two members given one record with the same delivery count shared one
        acquisition. Else by the clock: a member's lock was taken after `since` and lasts `lock_ms`, so
        it surely lives from its poll's return to `since` + `lock_ms` (the earliest it can run out), or
        to the member's acceptance if sooner; another member's acquisition surely inside that (its
        `since` after the first's return, its return before that end) is a double delivery."""
        accepted: dict[tuple[int | str, Where], float] = {}
        for op in self.ops:
            if op.f == "share-ack" and op.type == "invoke":
                for t, p, o, _ in _records(op.value["records"]):
                    assert o is not None
                    accepted.setdefault((op.process, (t, p, o)), float(op.value["at"]))
        held: dict[Where, list[tuple[float, float, int, Op]]] = defaultdict(list)
        for op in self.ops:
            if op.f != "share-poll" or op.type != "ok":
                continue
            since, start = float(op.value["since"]), float(op.value["returned"])
            for (t, p, o, v), count in zip(_records(op.value["records"]), op.value["counts"], strict=True):
                assert o is not None
                self._consistent(op, t, p, o, v)
                for s, e, other_count, other in held[(t, p, o)]:
                    if other.process != op.process and (count == other_count or (s <= since and start < e)):
                        self.flag("share-double-delivery", f"{(t, p, o)} ({v}) acquired by {op.process} "
                                  f"(delivery {count}) while {other.process}'s lock (delivery {other_count}) "
                                  "was live", other.index, op.index)
                end = float(op.value["since"]) + op.value["lock_ms"] / 1000
                held[(t, p, o)].append((start, min(end, accepted.get((op.process, (t, p, o)), end)), count, op))

    def _exactly_once(self) -> None:
        """Consume-transform-produce: each input record below a group's committed offset was read by
        exactly one transaction that committed (or, unsure, whose records are in the log)."""
        assert self.final is not None
        done = [t for t in self.txns.values()
                if t.outcome == "ok" or (t.outcome == "info" and any(v in self.at for *_, v in t.sends))]
        by: dict[Where, list[_Txn]] = defaultdict(list)
        upto: dict[tuple[str, int], int] = {}
        for txn in done:
            for t, p, o, _ in txn.reads:
                assert o is not None
                by[(t, p, o)].append(txn)
            op = self.ops[txn.completed]
            for t, p, o in op.value.get("offsets") or []:
                upto[(str(t), int(p))] = max(upto.get((str(t), int(p)), 0), int(o))
        for where, txns in by.items():
            if len(txns) > 1:
                self.flag("reprocessed", f"{where} ({self.log.get(where)}) read by committed transactions "
                          f"{[t.id for t in txns]}", *[t.completed for t in txns])
        for (t, p, o), v in sorted(self.log.items()):
            if o < upto.get((t, p), 0) and (t, p, o) not in by:
                self.flag("unprocessed", f"{(t, p, o)} ({v}) below the committed offset {upto[(t, p)]}, "
                          "read by no committed transaction", self.final.index)

    def _definite_failures(self) -> None:
        assert self.final is not None
        for op in self.ops:
            if op.f == "send" and op.type == "fail" and str(op.value["v"]) in self.at:
                self.flag("failed-write-read", f"value {op.value['v']} failed definitely, read at "
                          f"{self.at[str(op.value['v'])]}", op.index, self.final.index)


def check(ops: list[Op], expect: Expect = Expect()) -> Result:
    """Every rule over one history."""
    return _Checker(ops, expect).run()


def check_file(path: Path, expect: Expect = Expect()) -> list[str]:
    """A history file's anomalies, one line each: the form tests/jepsen/schedules.py's checks return."""
    return [str(a) for a in check(read(path), expect).anomalies]
