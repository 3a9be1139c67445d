"""Consumer groups in Redis: membership and generation (one meta hash, one hash of members) and
committed offsets, all under the group's hash tag so each script touches one Cluster slot.

The meta hash holds `v` (a version every save bumps, for compare-and-set), `state`, `gen` and
`doc` (msgpack of the fields no script reads). Members are msgpack blobs by member id; the Lua
scripts only test membership, so the blobs stay opaque to them. Arrays handed to a script are
packed without msgpack's bin type, which Redis's `cmsgpack` cannot read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgpack

from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.scripts import Scripts


@dataclass
class MemberDoc:
    """One member as stored; `seq` keeps join order, which leader election relies on."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    seq: int = 0

    def pack(self) -> bytes:
        return _packb(
            {
                "i": self.instance_id,
                "c": self.client_id,
                "h": self.client_host,
                "s": self.session_timeout_ms,
                "r": self.rebalance_timeout_ms,
                "t": self.protocol_type,
                "p": [[n, m] for n, m in self.protocols],
                "a": self.assignment,
                "n": self.seq,
            }
        )

    @classmethod
    def unpack(cls, member_id: str, raw: bytes) -> MemberDoc:
        d = msgpack.unpackb(raw, raw=False)
        return cls(
            member_id, d["i"], d["c"], d["h"], d["s"], d["r"], d["t"],
            [(n, bytes(m)) for n, m in d["p"]], bytes(d["a"]), d["n"],
        )

    def metadata(self, protocol: str | None) -> bytes:
        return next((m for n, m in self.protocols if n == protocol), b"")


@dataclass
class GroupDoc:
    """A group as stored; `version` is what the next save compares against (0: not stored yet)."""

    group_id: str
    state: str = "Empty"
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, MemberDoc] = field(default_factory=dict)
    next_seq: int = 0
    version: int = 0

    def instance_owner(self, instance_id: str) -> str | None:
        return next((m.member_id for m in self.members.values() if m.instance_id == instance_id), None)


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_ms: int = 0

    def pack(self) -> bytes:
        return _packb([self.offset, self.leader_epoch, self.metadata, self.commit_ms])

    @classmethod
    def unpack(cls, raw: bytes | str) -> CommittedOffset:
        o, e, m, t = msgpack.unpackb(raw, raw=False)
        return cls(o, e, m, t)


def packed(group: GroupDoc) -> list[Any]:
    """The group as group-save-4 (and group-convert-6) take it: state, generation, doc, members,
    instances."""
    doc = _packb({"t": group.protocol_type, "p": group.protocol, "l": group.leader, "n": group.next_seq})
    members: list[Any] = []
    instances: list[Any] = []
    for m in group.members.values():
        members += [m.member_id, m.pack()]
        if m.instance_id:
            instances += [m.instance_id, m.member_id]
    return [group.state, group.generation, doc, _array(members), _array(instances)]


def _field(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"  # topic names never hold ':'


def _packb(value: Any) -> bytes:
    return bytes(msgpack.packb(value, use_bin_type=True))


def _array(items: list[Any]) -> bytes:
    return bytes(msgpack.packb(items, use_bin_type=False))


def packed_offsets(offsets: dict[tuple[str, int], CommittedOffset]) -> bytes:
    """Offsets as a script reads them: a msgpack array of field, record, field, record, ..."""
    pairs: list[Any] = []
    for (topic, partition), c in offsets.items():
        pairs += [_field(topic, partition), c.pack()]
    return _array(pairs)


def _pairs(flat: list[bytes]) -> dict[bytes, bytes]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class GroupStore:
    def __init__(self, redis: RedisClient, scripts: Scripts) -> None:
        self.redis = redis
        self.scripts = scripts

    @staticmethod
    def _keys(group_id: str) -> list[str]:
        return [keys.group_meta(group_id), keys.group_members(group_id), keys.group_instances(group_id)]

    async def load(self, group_id: str) -> GroupDoc | None:
        """The stored group, or None when it has never been saved (committed offsets alone count)."""
        async with storage_errors():
            flat_meta, flat_members = await self.scripts.call("group-load-2", self._keys(group_id)[:2], [])
        meta, members = _pairs(flat_meta), _pairs(flat_members)
        if not meta:
            return None
        doc = msgpack.unpackb(meta[b"doc"], raw=False) if b"doc" in meta else {}
        loaded = sorted(
            (MemberDoc.unpack(mid.decode(), raw) for mid, raw in members.items()), key=lambda m: m.seq
        )
        return GroupDoc(
            group_id,
            meta[b"state"].decode(),
            int(meta[b"gen"]),
            doc.get("t"),
            doc.get("p"),
            doc.get("l"),
            {m.member_id: m for m in loaded},
            doc.get("n", 0),
            int(meta[b"v"]),
        )

    async def save(self, group: GroupDoc, node: int = 0) -> int:
        """Write the group if its stored version is still `group.version` and no other gateway
        holds its lease; bumps the version. Returns 0 when saved, 1 when the version moved on,
        16 when another node coordinates the group."""
        async with storage_errors():
            reply = await self.scripts.call(
                "group-save-4",
                [*self._keys(group.group_id), keys.group_owner(group.group_id)],
                # version, state, generation, doc, members, instances, node
                [group.version, *packed(group), node],
            )
            if group.version == 0 and reply[0] == 0:
                await self.redis.sadd(keys.GROUPS, group.group_id)
        if reply[0] == 0:
            group.version = int(reply[1])
        return int(reply[0])

    async def commit(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: dict[tuple[str, int], CommittedOffset],
    ) -> int:
        """Store offsets if the committer may; returns 0 or the refusing code of group-commit-4."""
        async with storage_errors():
            reply = await self.scripts.call(
                "group-commit-4",
                [*self._keys(group_id), keys.group_offsets(group_id)],
                # generation, member_id, instance_id, offsets
                [generation, member_id, instance_id or "", packed_offsets(offsets)],
            )
            if reply[0] == 0 and int(reply[1]) == 1:
                await self.redis.sadd(keys.GROUPS, group_id)
        return int(reply[0])

    async def offsets(
        self, group_id: str, parts: list[tuple[str, int]] | None = None
    ) -> dict[tuple[str, int], CommittedOffset]:
        """Committed offsets of `parts` (all of the group's when None); absent ones are left out."""
        key = keys.group_offsets(group_id)
        async with storage_errors():
            if parts is None:
                raw = await self.redis.hgetall(key)
                found = {_text(k): v for k, v in raw.items()}
            else:
                if not parts:
                    return {}
                values = await self.redis.hmget(key, [_field(t, p) for t, p in parts])
                found = {_field(t, p): v for (t, p), v in zip(parts, values, strict=True) if v is not None}
        return _committed(found)

    async def offsets_of_groups(self, group_ids: list[str]) -> list[dict[tuple[str, int], CommittedOffset]]:
        """Every committed offset of each group, in one round trip (for a pass over all groups)."""
        pipe = self.redis.pipeline(transaction=False)
        for group_id in group_ids:
            pipe.hgetall(keys.group_offsets(group_id))
        async with storage_errors():
            replies = await pipe.execute()
        return [_committed({_text(k): v for k, v in raw.items()}) for raw in replies]

    async def delete_offsets(self, group_id: str, version: int, parts: list[tuple[str, int]]) -> bool:
        """Delete committed offsets if the group is still at `version`; False when it moved on."""
        if not parts:
            return True
        async with storage_errors():
            reply = await self.scripts.call(
                "group-offsets-delete-2",
                [keys.group_meta(group_id), keys.group_offsets(group_id)],
                [version, _array([_field(t, p) for t, p in parts])],  # version, fields
            )
        return int(reply) == 0

    async def delete(self, group_id: str) -> int:
        """Remove an empty group, its offsets and its lag history; returns 0, 68 (has members) or 69 (no such group)."""
        async with storage_errors():
            reply = await self.scripts.call("group-delete-5", [*self._keys(group_id), keys.group_offsets(group_id),
                                                               keys.group_lag(group_id)], [])
            if reply[0] in (0, 69):
                await self.redis.srem(keys.GROUPS, group_id)
        return int(reply[0])

    async def lease(self, group_id: str, node: int, address: str, ttl_ms: int) -> str | None:
        """Take or renew this node's lease on coordinating the group (ttl 0 gives it up); None when
        this node holds it, else the holder's "<node id> <host> <port>"."""
        async with storage_errors():
            # node, address, ttl_ms
            reply = await self.scripts.call("group-lease-1", [keys.group_owner(group_id)], [node, address, ttl_ms])
        return None if reply[0] == 0 else _text(reply[1])

    async def owner(self, group_id: str) -> str | None:
        """The lease holder's "<node id> <host> <port>", or None when nobody coordinates the group."""
        async with storage_errors():
            raw = await self.redis.get(keys.group_owner(group_id))
        return _text(raw) if raw is not None else None

    async def group_ids(self) -> list[str]:
        async with storage_errors():
            return sorted(_text(g) for g in await self.redis.smembers(keys.GROUPS))


def _committed(fields: dict[str, bytes | str]) -> dict[tuple[str, int], CommittedOffset]:
    """An offsets hash's "topic:partition" fields, unpacked."""
    out: dict[tuple[str, int], CommittedOffset] = {}
    for f, v in fields.items():
        topic, _, p = f.rpartition(":")
        out[(topic, int(p))] = CommittedOffset.unpack(v)
    return out
