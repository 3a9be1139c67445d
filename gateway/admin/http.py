"""The admin HTTP API: health, Prometheus metrics, topic admin. The CLI calls the same routes."""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from gateway import telemetry
from gateway.admin.body import json_body
from gateway.admin.console import ConsoleApi
from gateway.admin.listener import HttpListener, listen
from gateway.admin.metrics import Metrics
from gateway.admin.security import SecurityApi, authentication
from gateway.admin.share import ShareGroupsApi
from gateway.clock import now_ms
from gateway.domain.compaction import cleaner_view
from gateway.domain.fence import KeyState, full_key
from gateway.domain.groups import GroupError, GroupErrorKind
from gateway.domain.groups.admin import GroupView
from gateway.domain.log import effective_config
from gateway.domain.services import Services
from gateway.domain.tiering import tier_view
from gateway.domain.txn import TxnId, TxnInfo
from gateway.domain.watermark import PositionsWatermark
from gateway.errors import (
    ErrorCode,
    GatewayError,
    InvalidPartitions,
    InvalidRequest,
    TopicNotFound,
    TransactionNotFound,
)

_STATUS = {
    ErrorCode.TOPIC_NOT_FOUND: 404,
    ErrorCode.PARTITION_NOT_FOUND: 404,
    ErrorCode.SUBSCRIPTION_NOT_FOUND: 404,
    ErrorCode.TRANSACTION_NOT_FOUND: 404,
    ErrorCode.TOPIC_EXISTS: 409,
    ErrorCode.STORAGE_UNAVAILABLE: 503,
    ErrorCode.NOT_ALLOWED: 403,
    ErrorCode.AUTHENTICATION_FAILED: 401,
    ErrorCode.AUTHORIZATION_FAILED: 403,
}


@web.middleware
async def _answered(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every admin request counted (api: method and route, e.g. GET /admin/v2/topics/{name}) and a
    GatewayError answered as JSON with its code; an error is a status of 400 or more, counted by the
    gateway's error name, else by the status."""
    resource = request.match_info.route.resource
    stats = telemetry.api("admin", f"{request.method} {resource.canonical}" if resource is not None else "unmatched")
    began = time.perf_counter()
    status, error = 500, ""
    try:
        try:
            response = await handler(request)
        except GatewayError as exc:
            error, status = exc.code.name, _STATUS.get(exc.code, 400)
            if isinstance(exc, GroupError):
                error, status = exc.kind.name, 404 if exc.kind is GroupErrorKind.GROUP_ID_NOT_FOUND else 400
            return web.json_response(
                {"error": error, "message": str(exc), "retriable": exc.retriable},
                status=status, headers={"WWW-Authenticate": 'Basic realm="gateway"'} if status == 401 else None,
            )
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        stats.done(time.perf_counter() - began)
        if status >= 400:
            stats.failed(error or f"HTTP_{status}")


class AdminApi:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.metrics = Metrics(services)
        self.group_admin = self.metrics.group_admin

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/health", self.health),
            web.get("/metrics", self.prometheus),
            web.get("/admin/v2/topics", self.list_topics),
            web.post("/admin/v2/topics", self.create_topic),
            web.get("/admin/v2/topics/{name}", self.describe_topic),
            web.delete("/admin/v2/topics/{name}", self.delete_topic),
            web.patch("/admin/v2/topics/{name}/config", self.alter_config),
            web.get("/admin/v2/tiering", self.tiering),
            web.get("/admin/v2/topics/{name}/delayed", self.delayed_stats),
            web.get("/admin/v2/topics/{name}/watermarks", self.watermarks),
            web.post("/admin/v2/topics/{name}/watermarks/{producer}/idle", self.mark_idle),
            web.get("/admin/v2/gateways", self.gateways),
            web.get("/admin/v2/replication", self.replication),
            web.get("/admin/v2/groups", self.list_groups),
            web.get("/admin/v2/groups/{group}", self.describe_group),
            web.get("/admin/v2/transactions", self.list_transactions),
            web.get("/admin/v2/transactions/transaction-keys", self.list_keys),
            web.get("/admin/v2/transactions/transaction-keys/{key}", self.get_key),
            web.delete("/admin/v2/transactions/transaction-keys/{key}", self.delete_key),
            web.get("/admin/v2/transactions/{txn}", self.describe_transaction),
            web.post("/admin/v2/transactions/{txn}/abort", self.abort_transaction),
        ]

    async def gateways(self, request: web.Request) -> web.Response:
        """The gateways alive on this Redis as this one sees them, and who runs each background role."""
        svc = self.services
        holders = await svc.roles.holders()
        return web.json_response({
            "node_id": svc.config.node_id,
            "gateways": [{"node_id": p.node_id, "host": p.host, "kafka_port": p.kafka_port,
                          "native_port": p.native_port, "admin_port": p.admin_port} for p in svc.registry.live()],
            "roles": [{"role": r.name, "node_id": None if h is None else h.node_id,
                       "epoch": None if h is None else h.epoch} for r, h in zip(svc.roles.roles, holders, strict=True)],
        })

    async def replication(self, request: web.Request) -> web.Response:
        """Each Redis primary with its replicas: online or not, and how far behind (bytes of its
        replication stream not acknowledged, seconds since the last acknowledgement)."""
        return web.json_response([
            {"primary": p.address, "offset": p.offset, "replicas_online": p.online,
             "replicas": [asdict(r) for r in p.replicas]}
            for p in await self.services.log.replication()])

    async def health(self, request: web.Request) -> web.Response:
        try:
            redis_ok = await asyncio.wait_for(self.services.log.ping(), 2)
        except Exception:
            redis_ok = False
        # writes refused for memory: degraded, yet still serving reads and the control plane (200)
        refused = self.services.memory.reason()
        body: dict[str, Any] = {"status": "ok" if redis_ok and not refused else "degraded", "redis": redis_ok}
        if refused:
            body["writes_refused"] = refused
        return web.json_response(body, status=200 if redis_ok else 503)

    async def prometheus(self, request: web.Request) -> web.Response:
        body, content_type = await self.metrics.render()
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def list_topics(self, request: web.Request) -> web.Response:
        topics = await self.services.log.list_topics()
        return web.json_response([{"name": t.name, "partitions": t.partitions} for t in topics])

    async def create_topic(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        name = body.get("name")
        if not isinstance(name, str):
            raise InvalidRequest("'name' is required")
        config = {str(k): (None if v is None else str(v)) for k, v in (body.get("config") or {}).items()}
        partitions = body.get("partitions")  # absent or null: the gateway's default
        if partitions is not None and (not isinstance(partitions, int) or isinstance(partitions, bool)):
            raise InvalidPartitions(f"'partitions' must be an integer, not {partitions!r}")
        info = await self.services.log.create_topic(name, partitions, config)
        return web.json_response(await self._describe(info.name), status=201)

    async def describe_topic(self, request: web.Request) -> web.Response:
        return web.json_response(await self._describe(request.match_info["name"]))

    async def _describe(self, name: str) -> dict[str, Any]:
        info = await self.services.log.topic(name, create=False)
        bounds = await self.services.log.bounds_many([(name, p) for p in range(info.partitions)])
        sizes = await self.services.memory.partition_bytes(name, info.partitions)
        partitions: list[dict[str, Any]] = [
            {"partition": p, "log_start_offset": b[0] if b else None, "high_watermark": b[1] if b else None,
             "bytes": size}
            for p, (b, size) in enumerate(zip(bounds, sizes, strict=True))
        ]
        if "compact" in effective_config(info).get("cleanup.policy", "").split(","):
            for p, out in enumerate(partitions):  # the log cleaner's state (docs/compaction.md)
                view = await cleaner_view(self.services.log, name, p)
                out["cleaner"] = None if view is None else asdict(view)
        if effective_config(info).get("remote.storage.enable") == "true":
            for p, out in enumerate(partitions):  # local and tiered parts (README "Tiered storage")
                tiered = await tier_view(self.services.log, name, p)
                out["tier"] = None if tiered is None else asdict(tiered)
        return {
            "name": info.name,
            "partitions": partitions,
            "config": effective_config(info),
            "created_ms": info.created_ms,
        }

    async def tiering(self, request: web.Request) -> web.Response:
        """Every partition of every tiered topic with its local and remote parts, as the topic's own
        description has them: one call for the console's topics page and for scripts."""
        out: list[dict[str, Any]] = []
        for info in await self.services.log.list_topics():
            if effective_config(info).get("remote.storage.enable") != "true":
                continue
            try:
                described = await self._describe(info.name)
            except TopicNotFound:  # deleted meanwhile
                continue
            out += [{"topic": info.name, "partition": p["partition"], "log_start_offset": p["log_start_offset"],
                     "high_watermark": p["high_watermark"], **(p["tier"] or {})} for p in described["partitions"]]
        return web.json_response(out)

    async def delayed_stats(self, request: web.Request) -> web.Response:
        """Per partition: delayed messages waiting, buckets, next due time, memory per message."""
        info = await self.services.log.topic(request.match_info["name"], create=False)
        out = []
        for p in range(info.partitions):
            st = await self.services.delay.stats(info.name, p)
            out.append({
                "partition": p,
                "messages": st.messages,
                "open_bucket_messages": st.open_messages,
                "buckets": st.total_buckets,
                "pending_in_transactions": st.pending_transactions,
                "next_due_ms": st.next_due_ms if st.messages else None,
                "index_bytes_per_message": round(st.index_bytes_per_message, 2),
                "payload_bytes_per_message": round(st.payload_bytes_per_message, 2),
            })
        return web.json_response({"topic": info.name, "partitions": out})

    async def watermarks(self, request: web.Request) -> web.Response:
        """Per partition the watermark at its last stable offset with the producers in the set; per
        subscription and per consumer group, the watermark at its acknowledged or committed offsets."""
        info = await self.services.log.topic(request.match_info["name"], create=False)
        wm = self.services.watermark
        parts = await wm.partitions(info.name)
        return web.json_response({
            "topic": info.name,
            "watermark_ms": min((p.watermark for p in parts if p.watermark is not None), default=None),
            "partitions": [{
                "partition": p.partition,
                "last_stable_offset": p.offset,
                "watermark_ms": p.watermark,
                "producers": p.producers,
                "pending_transactional_marks": p.pending,
                "index_entries_read": p.entries_read,
            } for p in parts],
            "subscriptions": [_readers_json(r) for r in await wm.of_subscriptions(info.name)],
            "groups": [_readers_json(r)
                       for r in await wm.of_readers(info.name, await self._committed(info.name, info.partitions))],
        })

    async def mark_idle(self, request: web.Request) -> web.Response:
        """Take a producer that went away without a W_IDLE out of the topic's watermark set, with
        W_IDLE markers on its behalf."""
        topic, producer = request.match_info["name"], request.match_info["producer"]
        offsets = await self.services.watermark.mark_idle(topic, producer)
        return web.json_response({
            "topic": topic,
            "producer": producer,
            "was_in_set": offsets is not None,
            "offsets": {str(p): o for p, o in enumerate(offsets or [])},
        })

    async def _committed(self, topic: str, partitions: int) -> dict[str, dict[int, int]]:
        """Each consumer group's committed offsets on the topic's partitions, for groups with any."""
        parts = [(topic, p) for p in range(partitions)]
        out: dict[str, dict[int, int]] = {}
        for g in await self.services.groups.list_groups():
            committed = await self.services.groups.fetch_offsets(g.group_id, parts)
            positions = {p: c.offset for (_, p), c in committed.items() if c is not None}
            if positions:
                out[g.group_id] = positions
        return out

    async def delete_topic(self, request: web.Request) -> web.Response:
        await self.services.log.delete_topic(request.match_info["name"])
        return web.json_response({"deleted": request.match_info["name"]})

    async def alter_config(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        changes = {str(k): (None if v is None else str(v)) for k, v in body.items()}
        await self.services.log.alter_config(request.match_info["name"], changes)
        return web.json_response(await self._describe(request.match_info["name"]))


    async def list_groups(self, request: web.Request) -> web.Response:
        """Groups of both protocols: type, state, epoch, member count and lag summed per topic."""
        return web.json_response([
            {"group_id": v.group_id, "type": v.group_type, "protocol_type": v.protocol_type, "state": v.state,
             "group_epoch": v.group_epoch, "members": len(v.members), "lag": v.lag_by_topic()}
            for v in await self.group_admin.all()
        ])

    async def describe_group(self, request: web.Request) -> web.Response:
        group_id = request.match_info["group"]
        view = await self.group_admin.describe(group_id)
        if view is None:
            raise GroupError(GroupErrorKind.GROUP_ID_NOT_FOUND, f"no group {group_id!r}")
        return web.json_response(_group_json(view))

    async def list_transactions(self, request: web.Request) -> web.Response:
        """Unfinished transactions with their age and partitions: where a hanging one shows."""
        infos = await self.services.txn.open_transactions()
        return web.json_response([_txn_json(i) for i in infos])

    async def describe_transaction(self, request: web.Request) -> web.Response:
        info = await self.services.txn.describe(TxnId.parse(request.match_info["txn"]))
        if info is None:
            raise TransactionNotFound(f"no transaction {request.match_info['txn']}")
        return web.json_response(_txn_json(info))

    async def abort_transaction(self, request: web.Request) -> web.Response:
        txn = TxnId.parse(request.match_info["txn"])
        if await self.services.txn.describe(txn) is None:
            raise TransactionNotFound(f"no transaction {txn}")
        state = await self.services.txn.end(txn, commit=False)
        return web.json_response({"txn": str(txn), "state": state})


    async def list_keys(self, request: web.Request) -> web.Response:
        return web.json_response([await self._key_json(k) for k in await self.services.fence.list()])

    def _owner_key(self, request: web.Request) -> tuple[str, str]:
        """`{key}` is the user's key (owner: the caller, anonymous until authentication exists),
        or a full `owner&key`."""
        raw = request.match_info["key"]
        owner, sep, key = raw.partition("&")
        return (owner, key) if sep else ("", raw)

    async def get_key(self, request: web.Request) -> web.Response:
        owner, key = self._owner_key(request)
        state = await self.services.fence.get(owner, key)
        if state is None:
            raise TransactionNotFound(f"no transaction key {key!r}")
        return web.json_response(await self._key_json(state))

    async def delete_key(self, request: web.Request) -> web.Response:
        owner, key = self._owner_key(request)
        state = await self.services.fence.delete(full_key(owner, key))
        if state is None:
            raise TransactionNotFound(f"no transaction key {key!r}")
        return web.json_response({"deleted": state.name, "aborted_txn": state.txn or None})

    async def _key_json(self, state: KeyState) -> dict[str, Any]:
        txn = None
        if state.txn:
            info = await self.services.txn.describe(state.txn)
            if info is not None and info.state not in ("COMMITTED", "ABORTED"):
                txn = _txn_json(info)
        owner, _, key = state.name.partition("&")
        return {
            "key": key,
            "owner": owner,
            "epoch": state.epoch,
            "producer_id": state.producer_id,
            "open_transaction": txn,
            "incarnation": state.incarnation or None,
            "last_commit_id": state.last_commit_id if state.last_commit_id >= 0 else None,
            "age_ms": max(0, now_ms() - state.created_ms),
            "idle_ms": max(0, now_ms() - state.updated_ms),
        }


def _readers_json(r: PositionsWatermark) -> dict[str, Any]:
    return {"name": r.name, "watermark_ms": r.watermark, "offsets": {str(p): o for p, o in r.positions.items()}}


def _group_json(v: GroupView) -> dict[str, Any]:
    return {
        "group_id": v.group_id,
        "type": v.group_type,
        "protocol_type": v.protocol_type,
        "state": v.state,
        "group_epoch": v.group_epoch,
        "assignment_epoch": v.assignment_epoch,
        "assignor": v.assignor,
        "members": [{
            "member_id": m.member_id,
            "instance_id": m.instance_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "member_epoch": m.member_epoch,
            "subscribed_topics": m.subscribed_topics,
            "subscribed_regex": m.subscribed_regex,
            "assigned": m.assigned,
            "target": m.target,
        } for m in v.members],
        "offsets": [{"topic": o.topic, "partition": o.partition, "committed": o.committed,
                     "high_watermark": o.high_watermark, "lag": o.lag, "metadata": o.metadata} for o in v.offsets],
        "lag": v.lag_by_topic(),
    }


def _txn_json(info: TxnInfo) -> dict[str, Any]:
    return {
        "txn": info.txn_id,
        "state": info.state,
        "age_ms": max(0, now_ms() - info.start_ms),
        "timeout_ms": info.timeout_ms,
        "producer_id": info.producer_id,
        "producer_epoch": info.producer_epoch,
        "owner": info.owner,
        "partitions": [{"topic": t, "partition": p} for t, p in info.partitions],
        "subscriptions": [{"topic": t, "partition": p, "subscription": s} for t, p, s in info.subscriptions],
    }


async def start_admin_server(services: Services, host: str, port: int) -> HttpListener:
    api = AdminApi(services)
    app = web.Application(middlewares=[_answered, authentication(services.security)])
    app.add_routes(api.routes() + SecurityApi(services.security).routes() + ShareGroupsApi(services.share).routes())
    app.add_routes(ConsoleApi(services).routes())
    return await listen(app, services.config, host, port)
