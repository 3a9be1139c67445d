"""The web console: static pages under /console, and the few admin routes only it needed (a topic's
messages, a test message, a group's offsets reset and lag history, each Redis primary's memory
against its budget).

The pages are plain HTML, CSS and ES modules shipped in the wheel (gateway/admin/console/), with no
build step; they read the admin JSON API from the browser, so they sit behind the same login as it
(the authentication middleware guards /console as any other route) and show what it says.
"""

from __future__ import annotations

import io
import json
from importlib import resources
from pathlib import Path
from typing import Any

import avro.io
from aiohttp import web

from gateway import telemetry
from gateway.admin.body import json_body
from gateway.domain.groups import GroupError
from gateway.domain.schemas import proto
from gateway.domain.schemas.formats import descriptor_of, proto_imports
from gateway.domain.services import Services
from gateway.errors import GatewayError, InvalidRequest, OffsetOutOfRange
from gateway.formats.partitioner import partition_for_key
from gateway.formats.records import Record, build_batch, iter_records

ASSETS = Path(str(resources.files("gateway.admin") / "console"))
MAX_MESSAGES = 200
KEY_SCAN = 5_000
"""Records a key search reads past its starting offset before it answers with what it found."""
READ_BYTES = 1 << 20


def _int(request: web.Request, name: str, default: int | None) -> int | None:
    raw = request.query.get(name, "")
    if raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidRequest(f"'{name}' must be an integer, not {raw!r}") from None


class ConsoleApi:
    def __init__(self, services: Services) -> None:
        self.services = services

    def routes(self) -> list[web.AbstractRouteDef]:
        return [
            web.get("/console", self.index),
            web.get("/console/", self.index),
            web.static("/console/assets", ASSETS),
            web.get("/admin/v2/memory", self.memory),
            web.get("/admin/v2/throughput", self.throughput),
            web.get("/admin/v2/topics/{name}/messages", self.messages),
            web.post("/admin/v2/topics/{name}/messages", self.produce),
            web.post("/admin/v2/groups/{group}/offsets", self.reset_offsets),
            web.get("/admin/v2/groups/{group}/lag-history", self.lag_history),
        ]

    async def index(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(ASSETS / "index.html")

    async def memory(self, request: web.Request) -> web.Response:
        """Each Redis primary's memory as the produce path last sampled it, with the mark where
        produce stops (docs: "Memory is the disk")."""
        budget = self.services.memory
        return web.json_response({
            "high_watermark": budget.high_watermark,
            "writes_refused": budget.reason(),
            "primaries": [{"address": p.address, "used": p.used, "maxmemory": p.maxmemory, "policy": p.policy,
                           "mark": int(p.maxmemory * budget.high_watermark)} for p in budget.primaries],
        })

    async def throughput(self, request: web.Request) -> web.Response:
        """This gateway's bytes produced and fetched since it started, per face: counters the
        overview's chart turns into rates between two reads."""
        produced: dict[str, int] = {}
        fetched: dict[str, int] = {}
        for (face, _), n in telemetry.PRODUCED.items():
            produced[face] = produced.get(face, 0) + n
        for (face, _), n in telemetry.FETCHED.items():
            fetched[face] = fetched.get(face, 0) + n
        return web.json_response({"node_id": self.services.config.node_id, "produced_bytes": produced,
                                  "fetched_bytes": fetched})

    async def messages(self, request: web.Request) -> web.Response:
        """Committed records of one partition from `offset` (default: the last `limit`), or from the
        first at or after `timestamp`; with `key`, only records of that key (UTF-8), searched over
        at most KEY_SCAN records. Values decoded by `format`: auto (the Schema Registry's wire
        format, then JSON, then text, else hex), json, text or hex."""
        log = self.services.log
        topic = request.match_info["name"]
        partition = _int(request, "partition", 0) or 0
        await log.check_partition(topic, partition)
        limit = max(1, min(MAX_MESSAGES, _int(request, "limit", 20) or 20))
        fmt = request.query.get("format", "auto")
        if fmt not in ("auto", "json", "text", "hex"):
            raise InvalidRequest(f"'format' is one of auto, json, text, hex, not {fmt!r}")
        key = request.query.get("key")
        start_offset, hw = await log.bounds(topic, partition)
        offset = _int(request, "offset", None)
        ts = _int(request, "timestamp", None)
        if ts is not None:
            found = await log.offset_for_time(topic, partition, ts)
            offset = hw if found is None else found[0]
        elif offset is None:
            offset = max(start_offset, hw - limit) if key is None else start_offset
        if not start_offset <= offset <= hw:
            raise OffsetOutOfRange(f"{topic}-{partition}: offset {offset} is outside [{start_offset}, {hw}]")
        out: list[Record] = []
        at, scanned = offset, 0
        while len(out) < limit and at < hw and scanned < KEY_SCAN:
            got = await log.read_range(topic, partition, at, -1, READ_BYTES)
            for e in got.entries:
                for r in iter_records(e.batch, e.base_offset):
                    if r.offset >= at:
                        scanned += 1
                        if key is None or (r.key is not None and r.key == key.encode()):
                            out.append(r)
            if got.next_offset <= at:
                break
            at = got.next_offset
        out = out[:limit]
        return web.json_response({
            "topic": topic, "partition": partition, "log_start_offset": start_offset, "high_watermark": hw,
            "from_offset": offset, "next_offset": out[-1].offset + 1 if out else at,
            "messages": [await self._record_json(r, fmt) for r in out],
        })

    async def _record_json(self, r: Record, fmt: str) -> dict[str, Any]:
        return {
            "offset": r.offset, "timestamp": r.timestamp,
            "key": None if r.key is None else _plain(r.key, "auto" if fmt == "auto" else fmt),
            "value": None if r.value is None else await self._value(r.value, fmt),
            "headers": [{"key": k, "value": None if v is None else _plain(v, "auto")} for k, v in r.headers],
        }

    async def _value(self, value: bytes, fmt: str) -> dict[str, Any]:
        """A value as the format says; in auto, one in the Schema Registry's wire format (magic 0, a
        schema id the gateway's registry knows) decoded by its schema, Avro, JSON Schema or Protobuf
        (its message indexes naming the message type); a value its schema does not read is hex."""
        if fmt == "auto" and len(value) > 5 and value[0] == 0:
            schema_id = int.from_bytes(value[1:5], "big")
            registry = self.services.schemas
            try:
                version = (await registry.fresh()).by_id(schema_id)[0]
            except (IndexError, GatewayError):
                version = None
            if version is not None:
                shown = {"schema_id": schema_id, "subject": version.subject, "schema_type": version.schema_type}
                try:
                    if version.schema_type == "AVRO":
                        model = registry.parsed(version).model
                        datum = avro.io.DatumReader(model).read(avro.io.BinaryDecoder(io.BytesIO(value[5:])))
                        return {**shown, "format": "avro", "data": json.loads(json.dumps(datum, default=repr))}
                    if version.schema_type == "JSON":
                        return {**shown, "format": "json", "data": json.loads(value[5:])}
                    if version.schema_type == "PROTOBUF":
                        parsed = registry.parsed(version)
                        message, data = proto.decode(descriptor_of(parsed), proto_imports(parsed), value[5:])
                        return {**shown, "format": "protobuf", "message": message, "data": data}
                except Exception:  # not what its schema says: shown raw below
                    pass
                return {**shown, **_plain(value, "hex")}
        return _plain(value, fmt)

    async def produce(self, request: web.Request) -> web.Response:
        """A test message: `{"value": ..., "key": ..., "partition": N, "headers": {...}}` (strings,
        UTF-8), to the key's partition as Kafka's default partitioner picks it, else partition 0."""
        topic = request.match_info["name"]
        body = await json_body(request)
        value, key = body.get("value"), body.get("key")
        if value is not None and not isinstance(value, str) or key is not None and not isinstance(key, str):
            raise InvalidRequest("'value' and 'key' are strings (or null)")
        headers = body.get("headers") or {}
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            raise InvalidRequest("'headers' is an object of strings")
        info = await self.services.log.topic(topic, create=False)
        partition = body.get("partition")
        if partition is None:
            partition = partition_for_key(key.encode(), info.partitions) if key else 0
        if not isinstance(partition, int) or isinstance(partition, bool):
            raise InvalidRequest(f"'partition' must be an integer, not {partition!r}")
        await self.services.log.check_partition(topic, partition)
        batch = build_batch([(None if key is None else key.encode(), None if value is None else value.encode(),
                              [(str(k), v.encode()) for k, v in headers.items()])])
        [produced] = await self.services.log.append([(topic, partition, batch)])
        if isinstance(produced.result, Exception):
            raise produced.result
        telemetry.produced("admin", topic, len(batch))
        return web.json_response({"topic": topic, "partition": partition, "offset": produced.result.base_offset},
                                 status=201)

    async def lag_history(self, request: web.Request) -> web.Response:
        """The group's lag as the lag sampler role recorded it (`gateway.domain.groups.lag_history`),
        oldest first, from `since` (ms) on: each sample's time, total, and lag per partition."""
        group = request.match_info["group"]
        samples = await self.services.lag.read(group, _int(request, "since", 0) or 0)
        return web.json_response({
            "group_id": group, "interval_s": self.services.config.lag_sample_interval,
            "samples": [{"timestamp": s.timestamp, "total": s.total,
                         "partitions": {t: {str(p): lag for p, lag in ps} for t, ps in s.partitions.items()}}
                        for s in samples],
        })

    async def reset_offsets(self, request: web.Request) -> web.Response:
        """Reset an empty group's committed offsets on a topic, as kafka-consumer-groups
        --reset-offsets does (an OffsetCommit of no member, generation -1, which Kafka's coordinator
        accepts only while the group has no members): `{"topic": t, "to": "earliest" | "latest" |
        N, "partitions": [...]}` (all partitions by default)."""
        group = request.match_info["group"]
        body = await json_body(request)
        topic, to = body.get("topic"), body.get("to")
        if not isinstance(topic, str):
            raise InvalidRequest("'topic' is required")
        info = await self.services.log.topic(topic, create=False)
        parts = body.get("partitions") or list(range(info.partitions))
        if not isinstance(parts, list) or not all(isinstance(p, int) for p in parts):
            raise InvalidRequest("'partitions' is a list of integers")
        for p in parts:
            await self.services.log.check_partition(topic, p)
        bounds = await self.services.log.bounds_many([(topic, p) for p in parts])
        offsets: dict[tuple[str, int], tuple[int, int, str | None]] = {}
        for p, b in zip(parts, bounds, strict=True):
            low, high = b or (0, 0)
            if to == "earliest":
                target = low
            elif to == "latest":
                target = high
            elif isinstance(to, int) and not isinstance(to, bool):
                target = min(max(to, low), high)
            else:
                raise InvalidRequest(f"'to' is earliest, latest or an offset, not {to!r}")
            offsets[(topic, p)] = (target, -1, None)
        errors = await self.services.groups.commit_offsets(group, -1, "", offsets)
        failed = {f"{t}-{p}": e.name for (t, p), e in errors.items() if e is not None}
        if failed:
            raise GroupError(next(e for e in errors.values() if e is not None), f"reset refused: {failed}")
        return web.json_response({"group": group, "topic": topic,
                                  "offsets": {str(p): offsets[(topic, p)][0] for p in parts}})


def _plain(data: bytes, fmt: str) -> dict[str, Any]:
    """Bytes shown as JSON, text or hex; auto picks the first that fits."""
    if fmt in ("auto", "json"):
        try:
            return {"format": "json", "data": json.loads(data)}
        except ValueError:
            if fmt == "json":
                raise InvalidRequest("a value is not JSON: ask for text or hex") from None
    if fmt in ("auto", "text"):
        try:
            return {"format": "text", "data": data.decode()}
        except UnicodeDecodeError:
            if fmt == "text":
                return {"format": "text", "data": data.decode(errors="replace")}
    return {"format": "hex", "data": data.hex()}
