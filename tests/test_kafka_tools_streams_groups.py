"""KIP-1071's streams group protocol on the wire: StreamsGroupHeartbeat and StreamsGroupDescribe as a
Streams client sends them, one scenario against the gateway and the real Kafka 4.4 broker, their
answers compared (member ids, which each side draws at random, named by their order of joining);
Kafka's `kafka-streams-groups` tool describing and deleting the group prints the same on both."""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import eventually, kafka_bootstrap
from tests.kafka_clients import TIMEOUT, create_topic
from tests.kafka_jvm import allowed, same_on_both, tools, unique
from tests.kafka_wire import call

pytestmark = [pytest.mark.jvm, pytest.mark.kafka]

HEARTBEAT, DESCRIBE, LIST_GROUPS, FIND_COORDINATOR = 88, 89, 16, 10
RETRIABLE = {14, 15, 16}
ROW_ORDER = allowed("The order of rows in `kafka-streams-groups --describe`")


def topology(source: str, app: str) -> dict[str, Any]:
    """One subtopology reading `source` (two partitions) into a store with a compacted changelog."""
    return {"epoch": 1, "subtopologies": [{
        "subtopology_id": "0", "source_topics": [source], "source_topic_regex": [],
        "state_changelog_topics": [{"name": f"{app}-store-changelog", "partitions": 0, "replication_factor": 0,
                                    "topic_configs": [{"key": "cleanup.policy", "value": "compact"}]}],
        "repartition_sink_topics": [], "repartition_source_topics": [], "copartition_groups": [],
    }]}


def tasks(ids: Any) -> dict[str, list[int]] | None:
    return None if ids is None else {t.subtopology_id: sorted(t.partitions) for t in ids}


def owned(active: dict[str, list[int]] | None) -> list[dict[str, Any]]:
    return [{"subtopology_id": s, "partitions": ps} for s, ps in sorted((active or {}).items())]


class Member:
    """One streams client: its id, epoch and the active tasks it owns, heartbeating on one connection."""

    def __init__(self, conn: Any, group: str, process: str) -> None:
        self.conn, self.group, self.process = conn, group, process
        self.member_id, self.epoch = str(uuid.uuid4()), 0
        self.active: dict[str, list[int]] = {}

    async def beat(self, **extra: Any) -> Any:
        values = {"group_id": self.group, "member_id": self.member_id, "member_epoch": self.epoch,
                  "endpoint_information_epoch": 0, "active_tasks": owned(self.active), "standby_tasks": [],
                  "warmup_tasks": [], **extra}
        r = await call(self.conn, HEARTBEAT, 0, values)
        if r.error_code == 0:
            self.epoch = r.member_epoch
            if r.active_tasks is not None:
                self.active = tasks(r.active_tasks) or {}
        return r


@contextlib.asynccontextmanager
async def connections(bs: str, n: int) -> AsyncIterator[list[Any]]:
    """`n` connections to `bs`, closed at the end."""
    host, port = bs.rsplit(":", 1)
    conns = [await asyncio.open_connection(host, int(port)) for _ in range(n)]
    try:
        yield conns
    finally:
        for _, writer in conns:
            writer.close()


async def coordinator_ready(conn: Any, group: str) -> None:
    """Until the group has a coordinator: Kafka creates its offsets topic at the first ask."""
    async def ready() -> bool:
        r = await call(conn, FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
        return r.coordinators[0].error_code == 0

    await eventually(ready, 30, "the group coordinator")


async def set_group_config(bs: str, group: str, name: str, value: str) -> None:
    """Set one of the group's configs (IncrementalAlterConfigs), awaited until DescribeConfigs reads
    back a value other than the one before (Kafka writes a list as it parses it, "zone,rack"):
    Kafka's broker applies a group's configs once the controller's record reaches its metadata
    cache, a moment after the answer, and the join that follows must be told them."""
    import confluent_kafka.admin as cka

    admin = cka.AdminClient({"bootstrap.servers": bs})
    group_resource = cka.ConfigResource(cka.ResourceType.GROUP, group)

    def described() -> str | None:
        (f,) = admin.describe_configs([group_resource]).values()
        return f.result(TIMEOUT)[name].value  # type: ignore[no-any-return]

    before = await asyncio.to_thread(described)
    resource = cka.ConfigResource(cka.ResourceType.GROUP, group, incremental_configs=[
        cka.ConfigEntry(name, value, incremental_operation=cka.AlterConfigOpType.SET)])
    (f,) = admin.incremental_alter_configs([resource]).values()
    await asyncio.to_thread(f.result, TIMEOUT)

    async def applied() -> bool:
        return await asyncio.to_thread(described) != before

    await eventually(applied, TIMEOUT, f"group {group}'s {name} applied")


async def group_configs(bs: str, group: str) -> list[tuple[str, str, bool]]:
    """The group's streams configs once it sets its heartbeat interval (IncrementalAlterConfigs),
    as DescribeConfigs lists them: the join that follows is told that interval."""
    import confluent_kafka.admin as cka

    await set_group_config(bs, group, "streams.heartbeat.interval.ms", "6000")
    admin = cka.AdminClient({"bootstrap.servers": bs})
    (f,) = admin.describe_configs([cka.ConfigResource(cka.ResourceType.GROUP, group)]).values()
    described = await asyncio.to_thread(f.result, TIMEOUT)
    return sorted((name, e.value, e.is_default) for name, e in described.items() if name.startswith("streams."))


def seen(r: Any) -> dict[str, Any]:
    return {"error": int(r.error_code), "epoch": r.member_epoch,
            "status": sorted(int(s.status_code) for s in r.status or ()),
            "active": tasks(r.active_tasks), "standby": tasks(r.standby_tasks), "warmup": tasks(r.warmup_tasks),
            "interval": r.heartbeat_interval.total_seconds()}


async def scenario(bs: str) -> dict[str, Any]:
    app = unique("sg")
    source = f"{app}-in"
    await create_topic(bs, source, 2)
    host, port = bs.rsplit(":", 1)
    conns = [await asyncio.open_connection(host, int(port)) for _ in range(2)]
    out: dict[str, Any] = {}
    try:
        await coordinator_ready(conns[0], app)
        out["configs"] = await group_configs(bs, app)
        a, b = Member(conns[0], app, "p-a"), Member(conns[1], app, "p-b")
        async def join() -> Any:  # retried while Kafka loads the offsets topic it just created
            r = await a.beat(rebalance_timeout=30000, topology=topology(source, app), process_id=a.process,
                             client_tags=[], active_tasks=[])
            return r if r.error_code not in RETRIABLE else None

        joined = await eventually(join, 30, "the first member joined")
        out["a joins"] = seen(joined)

        async def a_has_tasks() -> bool:
            return bool((await a.beat()).active_tasks)

        await eventually(a_has_tasks, 30, "the internal topic created and tasks assigned")
        out["a assigned"] = a.active
        r = await b.beat(rebalance_timeout=30000, topology=topology(source, app), process_id=b.process,
                         client_tags=[], active_tasks=[])
        out["b joins"] = (int(r.error_code), tasks(r.active_tasks))  # its delay depends on the time since

        async def describe() -> Any:
            req = {"group_ids": [app], "include_authorized_operations": False}
            return (await call(conns[0], DESCRIBE, 0, req)).groups[0]

        async def stable() -> Any:
            """Both members heartbeat (a revoking before b gets its tasks) until the group is stable."""
            for m in (a, b):
                assert (await m.beat()).error_code == 0
            d = await describe()
            return d if d.group_state == "Stable" else None

        d = await eventually(stable, 30, "the group stable with both members")
        names = {a.member_id: "a", b.member_id: "b"}
        out["described"] = {
            "error": int(d.error_code), "epochs": d.group_epoch - d.assignment_epoch,
            "topology": [(s.subtopology_id, [t.removeprefix(app) for t in s.source_topics], [(t.name.removeprefix(app), t.partitions)
                                                              for t in s.state_changelog_topics])
                         for s in d.topology.subtopologies or ()],
            "members": sorted((names[m.member_id], m.process_id, m.topology_epoch, m.member_epoch == d.group_epoch,
                               tasks(m.assignment.active_tasks), tasks(m.target_assignment.active_tasks))
                              for m in d.members),
        }
        classic = (await call(conns[0], 15, 6, {"groups": [app], "include_authorized_operations": False})).groups[0]
        out["describe groups"] = (int(classic.error_code), classic.error_message.replace(app, "APP"), classic.group_state,
                                  classic.protocol_type, classic.protocol_data, len(classic.members))
        listed = await call(conns[0], LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["streams"]})
        out["listed"] = [(g.group_state, g.group_type, g.protocol_type) for g in listed.groups if g.group_id == app]

        def normal(text: str) -> str:
            """The tool's output with ids named, the coordinator's address set aside, each table's
            rows sorted (ROW_ORDER)."""
            for member_id, name in names.items():
                text = text.replace(member_id, f"<member {name}>")
            text = re.sub(r"127\.0\.0\.1:\d+ \(\d+\)", "<coordinator>", text.replace(app, "APP"))
            lines = [" ".join(line.split()) for line in text.splitlines()]
            return "\n".join(lines[:1] + sorted(lines[1:]))

        tool = ["kafka-streams-groups", "--bootstrap-server", bs]
        runs = await tools([*tool, "--describe", "--group", app], [*tool, "--describe", "--group", app, "--members"],
                           [*tool, "--describe", "--group", app, "--state"],
                           [*tool, "--describe", "--group", app, "--members", "--verbose"],
                           [*tool, "--delete", "--group", app])
        out["tool while stable"] = [(normal(" ".join(r.command[4:])), r.exit, normal(r.out)) for r in runs]
        # refusals
        stranger = Member(conns[1], app, "p-c")
        stranger.epoch = 3
        r = await stranger.beat()
        out["unknown member"] = (int(r.error_code), r.error_message is not None)
        r = await Member(conns[1], app, "p-c").beat(rebalance_timeout=30000, process_id="p-c", active_tasks=[])
        out["no topology"] = (int(r.error_code), r.error_message)
        r = await call(conns[1], HEARTBEAT, 0, {
            "group_id": app, "member_id": b.member_id, "member_epoch": b.epoch + 5, "endpoint_information_epoch": 0,
            "active_tasks": None, "standby_tasks": None, "warmup_tasks": None})
        out["epoch ahead"] = int(r.error_code)
        r = await b.beat(shutdown_application=True)
        out["b asks shutdown"] = [(int(x.status_code), normal(x.status_detail)) for x in r.status or ()]
        r = await a.beat()
        out["a told shutdown"] = [(int(x.status_code), normal(x.status_detail)) for x in r.status or ()]
        r = await b.beat(member_epoch=-1)
        out["b leaves"] = (int(r.error_code), r.member_epoch)
        r = await a.beat(member_epoch=-1)
        d = (await call(conns[0], DESCRIBE, 0, {"group_ids": [app, unique("none")],
                                                "include_authorized_operations": False})).groups
        out["emptied"] = [(int(g.error_code), g.group_state, len(g.members)) for g in d]
        runs = await tools([*tool, "--reset-offsets", "--group", app, "--all-input-topics", "--to-offset", "1",
                            "--execute"],
                           [*tool, "--describe", "--group", app, "--offsets"],
                           [*tool, "--delete-offsets", "--group", app, "--input-topic", source],
                           [*tool, "--delete", "--group", app], [*tool, "--list"])
        out["tool once empty"] = [(r.exit, normal(r.out)) for r in runs[:-1]] + [app in runs[-1].out]
    finally:
        for _, writer in conns:
            writer.close()
    return out


async def test_streams_group_protocol(gateway, kafka_broker):
    result = await same_on_both(gateway, kafka_broker, scenario)
    assert result["a assigned"] == {"0": [0, 1]}


def offsets(*reported: tuple[int, int]) -> list[dict[str, Any]]:
    """TaskOffsets of subtopology 0: (partition, offset sum) each."""
    return [{"subtopology_id": "0", "partition": p, "offset": n} for p, n in reported]


async def restarted_members(bs: str) -> dict[str, Any]:
    """Two members join a new group, as Streams instances restarted under new member ids do: they hold
    no tasks, but report the changelog offsets of the state they kept. Kafka 4.4 loses the offsets
    of the heartbeat that creates the group (c's), keeps d's, and so gives d the tasks it reports,
    partition 0 first, and c the rest; StreamsGroupDescribe shows each member's last reported
    offsets, which a heartbeat with null keeps, one with a task twice does not change (INVALID_REQUEST)
    and one with empty lists empties."""
    app = unique("sgo")
    await create_topic(bs, f"{app}-in", 2)
    out: dict[str, Any] = {}
    async with connections(bs, 2) as conns:
        await coordinator_ready(conns[0], app)
        c, d = Member(conns[0], app, "p-c"), Member(conns[1], app, "p-d")
        names = {c.member_id: "c", d.member_id: "d"}

        def beat(m: Member, **extra: Any) -> Any:
            """A heartbeat that reports no offsets (null, as a Streams client sends between reports)."""
            return m.beat(**({"task_offsets": None, "task_end_offsets": None} | extra))

        async def join(m: Member, reported: list[dict[str, Any]]) -> Any:
            r = await beat(m, rebalance_timeout=30000, topology=topology(f"{app}-in", app), process_id=m.process,
                           client_tags=[], active_tasks=[], task_offsets=reported, task_end_offsets=offsets((0, 120)))
            return r if r.error_code not in RETRIABLE else None

        await eventually(lambda: join(c, offsets((0, 100))), 30, "c joined")
        await eventually(lambda: join(d, offsets((0, 5), (1, 7))), 30, "d joined")

        async def assigned() -> bool:
            for m in (c, d):
                assert (await beat(m)).error_code == 0
            return bool(c.active and d.active)

        await eventually(assigned, 30, "both members assigned")
        out["assigned"] = {"c": c.active, "d": d.active}

        async def described() -> list[Any]:
            d = (await call(conns[0], DESCRIBE, 0, {"group_ids": [app], "include_authorized_operations": False}))
            return sorted((names[m.member_id], [(o.partition, o.offset) for o in m.task_offsets],
                           [(o.partition, o.offset) for o in m.task_end_offsets]) for m in d.groups[0].members)

        out["described"] = await described()
        r = await beat(c, task_offsets=offsets((0, 1), (0, 2)))
        out["reported twice"] = int(r.error_code)
        await beat(c, task_offsets=offsets((1, 9)))
        out["replaced"] = await described()
        await c.beat()  # empty lists, not null
        out["emptied"] = await described()
        for m in (c, d):
            await m.beat(member_epoch=-1)
    return out


async def test_task_offsets_decide_and_are_described(gateway, kafka_broker):
    result = await same_on_both(gateway, kafka_broker, restarted_members)
    assert result["assigned"] == {"c": {"0": [1]}, "d": {"0": [0]}}
    assert result["described"] == [("c", [], []), ("d", [(0, 5), (1, 7)], [(0, 120)])]
    assert result["reported twice"] == 42  # INVALID_REQUEST


async def versions_1(bs: str) -> dict[str, Any]:
    """StreamsGroupHeartbeat and StreamsGroupDescribe v1 and StreamsGroupTopologyDescriptionUpdate
    (KIP-1331) as Kafka 4.4 serves them without a topology description plugin: the versions listed,
    a v1 join answered with a 64-bit recovery lag, no description asked for and MISSING_CLIENT_TAGS
    for a tag the group's rack.aware.assignment.tags names (v0 is not told), a v1 describe naming
    the assignor and saying NOT_STORED (1) when asked for the description, and an update refused
    with UNSUPPORTED_VERSION."""
    app = unique("sgv")
    await create_topic(bs, f"{app}-in", 2)
    out: dict[str, Any] = {}
    async with connections(bs, 1) as (conn,):
        versions = (await call(conn, 18, 3, {"client_software_name": "t", "client_software_version": "1"})).api_keys
        out["versions"] = [(k.api_key, k.min_version, k.max_version) for k in versions if k.api_key in (88, 89, 93)]
        await coordinator_ready(conn, app)
        await set_group_config(bs, app, "streams.rack.aware.assignment.tags", "zone, rack")
        m = Member(conn, app, "p-v")

        async def join() -> Any:
            values = {"group_id": app, "member_id": m.member_id, "member_epoch": 0, "rebalance_timeout": 30000,
                      "topology": topology(f"{app}-in", app), "process_id": m.process,
                      "client_tags": [{"key": "zone", "value": "z1"}], "active_tasks": [], "standby_tasks": [],
                      "warmup_tasks": [], "endpoint_information_epoch": 0}
            r = await call(conn, HEARTBEAT, 1, values)
            return r if r.error_code not in RETRIABLE else None

        def tags_missing(r: Any) -> list[str]:
            return [s.status_detail for s in r.status or () if s.status_code == 6]

        r = await eventually(join, 30, "the member joined")
        out["joined"] = (int(r.error_code), r.member_epoch, r.acceptable_recovery_lag, r.topology_description_required,
                         tags_missing(r))
        m.epoch = r.member_epoch
        out["v0 not told of tags"] = tags_missing(await m.beat())  # MISSING_CLIENT_TAGS is v1's
        r = await call(conn, HEARTBEAT, 1, {"group_id": app, "member_id": "stranger", "member_epoch": 3,
                                            "endpoint_information_epoch": 0})
        out["refused"] = (int(r.error_code), r.acceptable_recovery_lag, r.topology_description_required)
        for include in (False, True):
            d = await call(conn, DESCRIBE, 1, {"group_ids": [app, unique("none")], "include_authorized_operations": False,
                                               "include_topology_description": include})
            out[f"described, description asked {include}"] = [
                (int(g.error_code), g.assignor_name, g.topology_description_status, g.topology_description)
                for g in d.groups]
        r = await call(conn, 93, 0, {"group_id": app, "member_id": m.member_id, "topology_epoch": 1,
                                     "topology_description": {"subtopologies": [], "global_stores": []}})
        out["description update"] = int(r.error_code)
    return out


async def test_the_versions_1_of_kip_1331(gateway, kafka_broker):
    result = await same_on_both(gateway, kafka_broker, versions_1)
    assert result["versions"] == [(88, 0, 1), (89, 0, 1), (93, 0, 0)]
    assert result["joined"][4] == ["Missing required client tags for rack-aware standby assignment: [rack]. "
                                   "Configure them via 'client.tag.<tagKey>' in your Streams config."]
    assert result["described, description asked True"][0][1:3] == ("sticky", 1)
    assert result["description update"] == 35  # UNSUPPORTED_VERSION


async def test_the_admin_api_describes_a_streams_group(gateway):
    """The gateway's admin API (and so its console) shows a streams group: its type and state, and
    each member with the input partitions of its active tasks."""
    from tests.test_admin_groups import get

    bs = kafka_bootstrap(gateway)
    app = unique("sg-admin")
    await create_topic(bs, f"{app}-in", 2)
    host, port = bs.rsplit(":", 1)
    conn = await asyncio.open_connection(host, int(port))
    try:
        a = Member(conn, app, "p-a")
        await a.beat(rebalance_timeout=30000, topology=topology(f"{app}-in", app), process_id=a.process,
                     client_tags=[], active_tasks=[])

        async def assigned() -> bool:
            return bool((await a.beat()).active_tasks)

        await eventually(assigned, 30, "the member's tasks")
        status, body = await get(gateway, f"/groups/{app}")
    finally:
        conn[1].close()
    assert status == 200 and isinstance(body, dict)
    assert (body["type"], body["state"]) == ("streams", "Stable")
    [m] = body["members"]
    assert m["assigned"] == {f"{app}-in": [0, 1]} and m["subscribed_topics"] == [f"{app}-in"]


async def settled_answer(bs: str, app: str) -> Any:
    """A member's first answer that no longer waits out the group's initial delay."""
    host, port = bs.rsplit(":", 1)
    conn = await asyncio.open_connection(host, int(port))
    try:
        a = Member(conn, app, "p-a")

        async def join() -> Any:
            r = await a.beat(rebalance_timeout=30000, topology=topology(f"{app}-in", app), process_id=a.process,
                             client_tags=[], active_tasks=[])
            return r if r.error_code not in RETRIABLE else None

        async def settled() -> Any:
            r = await a.beat()
            return r if r.error_code or 5 not in {s.status_code for s in r.status or ()} else None

        await coordinator_ready(conn, app)
        await eventually(join, 30, "the member joined")
        return await eventually(settled, 30, "the initial delay over")
    finally:
        conn[1].close()


async def misconfigured_internal_topic(bs: str) -> dict[str, Any]:
    """A group whose changelog topic exists before it, once with cleanup.policy=delete and once
    with a partition count the topology does not give it: what the member is told."""
    out: dict[str, Any] = {}
    for case, partitions, configs in (("delete policy", 2, {"cleanup.policy": "delete"}), ("one partition", 1, {})):
        app = unique("sg-bad")
        await create_topic(bs, f"{app}-in", 2)
        await create_topic(bs, f"{app}-store-changelog", partitions, **configs)
        r = await settled_answer(bs, app)
        out[case] = (int(r.error_code), [(int(s.status_code), s.status_detail.replace(app, "APP"))
                                         for s in r.status or ()], tasks(r.active_tasks))
    return out


async def test_a_misconfigured_internal_topic(gateway, kafka_broker):
    """Kafka's coordinator checks an existing internal topic's partition count
    (INCORRECTLY_PARTITIONED_TOPICS, no tasks), not its configs; so does the gateway's."""
    seen = await same_on_both(gateway, kafka_broker, misconfigured_internal_topic)
    assert seen["one partition"][1][0][0] == 2 and seen["delete policy"][2] == {"0": [0, 1]}
