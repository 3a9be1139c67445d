"""The share-group state machine alone (no Redis): joining, epochs, assignment, leaving, session
expiry, share sessions and their epochs, and the ISO-8601 durations of share.auto.offset.reset."""

from __future__ import annotations

import pytest

from gateway.domain.groups.errors import GroupError, GroupErrorKind
from gateway.domain.groups.share import ShareError, ShareErrorKind, ShareGroup, simple_assignment
from gateway.domain.groups.share_coordinator import duration_ms

TOPICS = {"a": 2, "b": 1}


def beat(g: ShareGroup, member: str, epoch: int, topics: list[str] | None = None, now: int = 0,
         sizes: dict[str, int] = TOPICS) -> tuple[int, dict[str, frozenset[int]] | None]:
    r = g.heartbeat(member, epoch, topics, sizes, now_ms=now, session_timeout_ms=1000)
    return r.member_epoch, r.assignment


def test_members_share_the_partitions_of_their_topics() -> None:
    g = ShareGroup("g")
    e1, a1 = beat(g, "m1", 0, ["a"])
    assert (e1, a1) == (2, {}), "a new group's first epoch is 2, and a's share state is not initialized yet"
    e1, a1 = beat(g, "m1", e1)
    assert (e1, a1) == (3, {"a": frozenset({0, 1})}), "initialized since: a new epoch assigns it"
    e2, a2 = beat(g, "m2", 0, ["a", "b"])
    assert (e2, a2) == (4, {"a": frozenset({1})}), "half of a; b is not initialized yet"
    e2, a2 = beat(g, "m2", e2)  # topic by topic: half of a, all of b
    assert (e2, a2) == (5, {"a": frozenset({1}), "b": frozenset({0})})
    # the group moved on: m1 is told its new assignment with the new epoch, then nothing
    assert beat(g, "m1", e1) == (e2, {"a": frozenset({0})})
    assert beat(g, "m1", e2) == (e2, None)
    assert g.state == "Stable"


def held(assignment: dict[str, set[tuple[str, int]]]) -> dict[tuple[str, int], int]:
    """How many members each partition is assigned to."""
    out: dict[tuple[str, int], int] = {}
    for tps in assignment.values():
        for tp in tps:
            out[tp] = out.get(tp, 0) + 1
    return out


@pytest.mark.parametrize(("members", "partitions"), [(3, 6), (4, 6), (4, 2), (3, 1), (7, 3), (1, 5)])
def test_the_simple_assignor_balances(members: int, partitions: int) -> None:
    """Each partition to ceil(members / partitions) members, each member within one partition of the others."""
    tps = [("t", p) for p in range(partitions)]
    got = simple_assignment(tps, [f"m{i}" for i in range(members)], {})
    sharing = -(-members // partitions)
    assert held(got) == {tp: sharing for tp in tps}
    sizes = [len(a) for a in got.values()]
    assert max(sizes) - min(sizes) <= 1


def test_the_simple_assignor_keeps_what_members_have() -> None:
    tps = [("t", p) for p in range(6)]
    before = {"m1": {("t", 0), ("t", 1), ("t", 2)}, "m2": {("t", 3), ("t", 4), ("t", 5)}}
    after = simple_assignment(tps, ["m1", "m2", "m3"], before)
    assert held(after) == {tp: 1 for tp in tps}
    assert all(len(a) == 2 for a in after.values())
    assert after["m1"] <= before["m1"] and after["m2"] <= before["m2"]  # only what the newcomer needs moved
    assert simple_assignment(tps, ["m1", "m2"], before) == before  # balanced already: nothing moves


def test_epochs_are_checked() -> None:
    g = ShareGroup("g")
    with pytest.raises(GroupError) as unknown:
        beat(g, "m1", 3, ["a"])
    assert unknown.value.kind == GroupErrorKind.UNKNOWN_MEMBER_ID
    epoch, _ = beat(g, "m1", 0, ["a"])
    with pytest.raises(GroupError) as fenced:
        beat(g, "m1", epoch + 5)
    assert fenced.value.kind == GroupErrorKind.FENCED_MEMBER_EPOCH
    with pytest.raises(GroupError) as nameless:
        beat(g, "", 0, ["a"])
    assert nameless.value.kind == GroupErrorKind.INVALID_REQUEST


def test_new_partitions_reach_the_members() -> None:
    g = ShareGroup("g")
    epoch, _ = beat(g, "m1", 0, ["b"])
    epoch, _ = beat(g, "m1", epoch)  # b's one partition initialized and assigned
    grown, assignment = beat(g, "m1", epoch, sizes={"a": 2, "b": 3})
    assert grown > epoch and assignment == {"b": frozenset({0})}, "the new ones are not initialized yet"
    assert beat(g, "m1", grown, sizes={"a": 2, "b": 3}) == (grown + 1, {"b": frozenset({0, 1, 2})})


def test_leaving_and_timing_out_remove_the_member_and_its_session() -> None:
    g = ShareGroup("g")
    beat(g, "m1", 0, ["a"], now=0)
    beat(g, "m2", 0, ["a"], now=500)
    g.session("m1", 0, [("a", 0)], [])
    assert g.next_deadline() == 1000
    assert g.expire(1000) == ["m1"]
    assert "m1" not in g.sessions and list(g.members) == ["m2"]
    epoch = g.members["m2"].epoch
    assert g.heartbeat("m2", -1, None, TOPICS, now_ms=600, session_timeout_ms=1000).left
    assert g.state == "Empty" and g.epoch > epoch


def test_share_session_epochs() -> None:
    g = ShareGroup("g")
    with pytest.raises(ShareError) as missing:
        g.session("m1", 1, [], [])
    assert missing.value.kind == ShareErrorKind.SHARE_SESSION_NOT_FOUND
    s = g.session("m1", 0, [("a", 0), ("a", 1)], [])
    assert s is not None and s.epoch == 1
    s = g.session("m1", 1, [], [("a", 1)])
    assert s is not None and s.partitions == {("a", 0)} and s.epoch == 2
    with pytest.raises(ShareError) as stale:
        g.session("m1", 1, [], [])
    assert stale.value.kind == ShareErrorKind.INVALID_SHARE_SESSION_EPOCH
    assert g.session("m1", -1, [], []) is None and "m1" not in g.sessions


@pytest.mark.parametrize(("text", "ms"), [
    ("PT1H30M", 5_400_000), ("P1D", 86_400_000), ("PT0.5S", 500), ("PT-1S", -1000), ("-PT2M", -120_000),
    ("P", None), ("PT", None), ("1H", None), ("PT1X", None),
])
def test_iso_durations(text: str, ms: int | None) -> None:
    assert duration_ms(text) == ms
