"""Share groups on the admin face: the HTTP listing and description, and their Prometheus gauges.

What is in flight (delivered and not yet acknowledged) is counted where it is held, on the gateway
serving each subscription: another gateway's share groups show their start offsets and members
but not its locks.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gateway.domain.groups.share_coordinator import ShareCoordinator, ShareGroupView
from gateway.errors import SubscriptionNotFound


class ShareGroupsApi:
    def __init__(self, share: ShareCoordinator) -> None:
        self.share = share

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/admin/v2/share-groups", self.list_groups),
            web.get("/admin/v2/share-groups/{group}", self.describe_group),
        ]

    async def list_groups(self, request: web.Request) -> web.Response:
        """Every share group with its state."""
        listed = await self.share.list_groups()
        return web.json_response({"share_groups": [{"group": g.group_id, "state": g.state} for g in listed]})

    async def describe_group(self, request: web.Request) -> web.Response:
        """One share group: members, per partition its start offset, records in flight by delivery
        count, and the records this gateway saw rejected, archived and dead-lettered."""
        group = request.match_info["group"]
        view = await self.share.view(group)
        if view is None:
            raise SubscriptionNotFound(f"no share group {group!r}")
        return web.json_response(view_json(view))


def view_json(v: ShareGroupView) -> dict[str, Any]:
    return {
        "group": v.group_id,
        "state": v.state,
        "epoch": v.epoch,
        "members": [{"member_id": m.member_id, "epoch": m.epoch, "client_id": m.client_id,
                     "client_host": m.client_host, "subscribed": list(m.subscribed)} for m in v.members],
        "partitions": [
            {"topic": t, "partition": p, "start_offset": start,
             "in_flight": sum(v.in_flight.get(t, {}).get(p, {}).values()),
             "delivery_counts": {str(n): c for n, c in v.in_flight.get(t, {}).get(p, {}).items()}}
            for t, parts in sorted(v.start_offsets.items()) for p, start in sorted(parts.items())
        ],
        "rejected": v.rejected,
        "archived": v.archived,
        "dead_lettered": v.dead_lettered,
    }


async def share_group_families(share: ShareCoordinator) -> list[Metric]:
    """gateway_share_group_* gauges and counters, one series per group (and partition)."""
    members = GaugeMetricFamily("gateway_share_group_members", "Members of a share group", labels=["group"])
    start = GaugeMetricFamily("gateway_share_group_start_offset", "A share group's start offset: every record "
                              "below it acknowledged or archived", labels=["group", "topic", "partition"])
    locked = GaugeMetricFamily("gateway_share_group_in_flight", "Records delivered and locked, not yet "
                               "acknowledged", labels=["group", "topic", "partition"])
    counts = GaugeMetricFamily("gateway_share_group_in_flight_by_delivery_count", "Records in flight by their "
                               "delivery count", labels=["group", "delivery_count"])
    rejected = CounterMetricFamily("gateway_share_group_rejected", "Records rejected by a share group's consumers",
                                   labels=["group"])
    archived = CounterMetricFamily("gateway_share_group_archived", "Records archived at the delivery count limit",
                                   labels=["group"])
    dead = CounterMetricFamily("gateway_share_group_dead_lettered", "Records copied to the group's dead-letter topic",
                               labels=["group"])
    for listing in await share.list_groups():
        v = await share.view(listing.group_id)
        if v is None:
            continue
        members.add_metric([v.group_id], len(v.members))
        rejected.add_metric([v.group_id], v.rejected)
        archived.add_metric([v.group_id], v.archived)
        dead.add_metric([v.group_id], v.dead_lettered)
        by_count: dict[int, int] = {}
        for t, parts in v.start_offsets.items():
            for p, offset in parts.items():
                start.add_metric([v.group_id, t, str(p)], offset)
                held = v.in_flight.get(t, {}).get(p, {})
                locked.add_metric([v.group_id, t, str(p)], sum(held.values()))
                for n, c in held.items():
                    by_count[n] = by_count.get(n, 0) + c
        for n, c in sorted(by_count.items()):
            counts.add_metric([v.group_id, str(n)], c)
    return [members, start, locked, counts, rejected, archived, dead]
