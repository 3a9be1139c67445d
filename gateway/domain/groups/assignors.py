"""Server-side partition assignors of the consumer group protocol (KIP-848): `uniform` and `range`.

One interface, as Kafka's `ConsumerGroupPartitionAssignor`: the group coordinator hands every member's
resolved subscription and its present *target* assignment (the stickiness base, as Kafka's
`TargetAssignmentBuilder` does) with the partition count of each subscribed topic, and gets the new
target of every member. Pure and deterministic: members are taken in member-id order and partitions
in (topic, partition) order, so the same input always gives the same assignment. Topics that do not
exist are left out by the caller (as Kafka's `TopicIds` drops unknown names).

Followed: Kafka's group-coordinator module, `assignor/UniformAssignor`,
`UniformHomogeneousAssignmentBuilder`, `UniformHeterogeneousAssignmentBuilder` and `RangeAssignor`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

Assignment = dict[str, frozenset[int]]
"""Partitions by topic name; a topic with no partition is left out."""

Partition = tuple[str, int]


@dataclass(frozen=True)
class MemberSpec:
    """What an assignor knows of a member: the topics it subscribes to (already resolved from names
    and regular expression) and its present target assignment."""

    topics: frozenset[str]
    current: Mapping[str, frozenset[int]] = field(default_factory=dict)


class Assignor(Protocol):
    """A server-side assignor, chosen by name (`group.remote.assignor` on the client)."""

    name: str

    def assign(self, members: Mapping[str, MemberSpec], partitions: Mapping[str, int]) -> dict[str, Assignment]:
        """The new target assignment of every member of `members` (an empty one included)."""
        ...


def _freeze(owned: Mapping[str, set[int]]) -> Assignment:
    return {t: frozenset(ps) for t, ps in sorted(owned.items()) if ps}


class UniformAssignor:
    """Spreads all subscribed partitions over the members so that, as far as subscriptions allow,
    no member has two partitions more than another (balance first), and moves as few partitions
    as that takes (stickiness second), as Kafka's `UniformAssignor` does.

    One algorithm for homogeneous and heterogeneous subscriptions: every member keeps what it had
    of topics it still subscribes to; each free partition goes to the least loaded subscriber;
    then, while a member holds two or more partitions above a subscriber of one of its topics, one
    partition moves (the most loaded member gives its last partition). With identical subscriptions
    that ends with loads within one of each other, moving only the surplus; with differing ones it
    stops when no single move improves balance, which, like Kafka's heterogeneous builder, is a
    heuristic rather than an optimum."""

    name = "uniform"

    def assign(self, members: Mapping[str, MemberSpec], partitions: Mapping[str, int]) -> dict[str, Assignment]:
        order = sorted(members)
        subscribers: dict[str, list[str]] = {}
        for mid in order:
            for t in sorted(members[mid].topics):
                if t in partitions:
                    subscribers.setdefault(t, []).append(mid)
        owned: dict[str, dict[str, set[int]]] = {mid: {} for mid in order}
        load = dict.fromkeys(order, 0)
        taken: set[Partition] = set()
        for mid in order:  # stickiness: keep what is still subscribed and still exists
            for t, ps in sorted(members[mid].current.items()):
                if t not in members[mid].topics or t not in partitions:
                    continue
                for p in sorted(ps):
                    if p < partitions[t] and (t, p) not in taken:
                        taken.add((t, p))
                        owned[mid].setdefault(t, set()).add(p)
                        load[mid] += 1
        for t in sorted(subscribers):
            for p in range(partitions[t]):
                if (t, p) not in taken:
                    mid = min(subscribers[t], key=lambda m: (load[m], m))
                    owned[mid].setdefault(t, set()).add(p)
                    load[mid] += 1
        while self._move_one(order, owned, load, subscribers):
            pass
        return {mid: _freeze(owned[mid]) for mid in order}

    @staticmethod
    def _move_one(
        order: list[str], owned: dict[str, dict[str, set[int]]], load: dict[str, int], subscribers: dict[str, list[str]]
    ) -> bool:
        """Move one partition from a most loaded member to a subscriber with two or more fewer;
        False when no such move exists. Each move lowers the sum of squared loads, so this ends."""
        for giver in sorted(order, key=lambda m: (-load[m], m)):
            for t in sorted((t for t, ps in owned[giver].items() if ps), reverse=True):
                takers = [m for m in subscribers.get(t, ()) if load[m] < load[giver] - 1]
                if not takers:
                    continue
                taker = min(takers, key=lambda m: (load[m], m))
                p = max(owned[giver][t])
                owned[giver][t].discard(p)
                owned[taker].setdefault(t, set()).add(p)
                load[giver] -= 1
                load[taker] += 1
                return True
        return False


class RangeAssignor:
    """Per topic, each subscriber gets a contiguous range of partitions, `partitions // members`
    each and one more for the first `partitions % members`, in member-id order; members subscribed
    to co-partitioned topics (same partition count) thus get the same partition numbers of each, so
    a join stays local. Sticky as Kafka's `RangeAssignor`: a member keeps its lowest previous
    partitions up to its quota (one extra where extras remain) and only the rest is handed out."""

    name = "range"

    def assign(self, members: Mapping[str, MemberSpec], partitions: Mapping[str, int]) -> dict[str, Assignment]:
        order = sorted(members)
        owned: dict[str, dict[str, set[int]]] = {mid: {} for mid in order}
        for t in sorted(partitions):
            subs = [mid for mid in order if t in members[mid].topics]
            if not subs:
                continue
            count = partitions[t]
            quota, extra = divmod(count, len(subs))
            kept: set[int] = set()
            unfilled: list[tuple[str, int]] = []
            for mid in subs:
                previous = sorted(p for p in members[mid].current.get(t, ()) if p < count)
                mine = owned[mid].setdefault(t, set())
                mine.update(previous[:quota])
                remaining = quota - len(previous)
                if remaining < 0 and extra > 0:
                    extra -= 1
                    mine.add(previous[quota])
                else:
                    unfilled.append((mid, remaining))
                kept |= mine
            free = [p for p in range(count) if p not in kept]
            pos = 0
            for mid, remaining in unfilled:
                if extra > 0:
                    remaining += 1
                    extra -= 1
                if remaining > 0:
                    owned[mid][t].update(free[pos:pos + remaining])
                    pos += remaining
        return {mid: _freeze(owned[mid]) for mid in order}


ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
"""Every assignor by name; the first is the default (Kafka's `group.consumer.assignors`)."""
