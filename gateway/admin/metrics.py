"""Prometheus metrics: the faces' counters (`gateway.telemetry`) and gauges read through the domain
services, all gathered per scrape. Every family is listed in the README's metrics table."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import accumulate

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from gateway import telemetry
from gateway.admin.share import share_group_families
from gateway.clock import now_ms
from gateway.domain.groups.admin import GroupAdmin
from gateway.domain.services import Services

_LE = [str(b) for b in telemetry.LATENCY_BUCKETS] + ["+Inf"]


def traffic_families() -> list[Metric]:
    """Requests, errors and latency per face and api; bytes per face and topic; connections per listener."""
    requests = CounterMetricFamily("gateway_requests", "Requests handled", labels=["face", "api"])
    errors = CounterMetricFamily("gateway_request_errors", "Requests answered with an error, by error code",
                                 labels=["face", "api", "code"])
    latency = HistogramMetricFamily("gateway_request_seconds", "Request handling time", labels=["face", "api"])
    for (face, api), st in sorted(telemetry.APIS.items()):
        requests.add_metric([face, api], st.requests)
        latency.add_metric([face, api], list(zip(_LE, accumulate(st.buckets), strict=True)), st.seconds)
        for code, n in sorted(st.errors.items()):
            errors.add_metric([face, api, code], n)
    produced = CounterMetricFamily("gateway_produced_bytes", "Record batch bytes appended to the log",
                                   labels=["face", "topic"])
    fetched = CounterMetricFamily("gateway_fetched_bytes", "Record batch bytes sent to consumers",
                                  labels=["face", "topic"])
    for family, counts in ((produced, telemetry.PRODUCED), (fetched, telemetry.FETCHED)):
        for (face, topic), n in sorted(counts.items()):
            family.add_metric([face, topic], n)
    opened = GaugeMetricFamily("gateway_connections", "Client connections open", labels=["listener"])
    accepted = CounterMetricFamily("gateway_connections_accepted", "Client connections accepted",
                                   labels=["listener"])
    refused = CounterMetricFamily("gateway_connections_refused",
                                  "Client connections closed at once for being over max_connections",
                                  labels=["listener"])
    for name, ls in sorted(telemetry.LISTENERS.items()):
        opened.add_metric([name], ls.open)
        accepted.add_metric([name], ls.accepted)
        refused.add_metric([name], ls.refused)
    return [requests, errors, latency, produced, fetched, opened, accepted, refused, *cleaner_families(),
            *tier_families()]


def cleaner_families() -> list[Metric]:
    """The log cleaner's passes over compacted topics run by this process, and the bytes they read and removed."""
    names = (("passes", "Log cleaner passes over a partition"), ("bytes_read", "Bytes of batches log cleaner passes read"),
             ("bytes_removed", "Bytes log cleaner passes removed from the log"))
    families = [CounterMetricFamily(f"gateway_cleaner_{name}", doc, labels=["topic"]) for name, doc in names]
    for topic, counts in sorted(telemetry.CLEANED.items()):
        for family, n in zip(families, counts, strict=True):
            family.add_metric([topic], n)
    return list(families)


def tier_families() -> list[Metric]:
    """Tiered storage on this process: bytes and segments copied, copy lag, remote fetches (their
    latency a histogram, as KIP-405's RemoteLogReaderFetchRateAndTimeMs is a timer) and the segment
    index cache."""
    t = telemetry.TIER
    out: list[Metric] = []
    for name, doc, value in (
        ("gateway_tier_bytes_copied", "Bytes of batches copied to tiered storage", t.bytes_copied),
        ("gateway_tier_segments_copied", "Segments copied to tiered storage", t.segments_copied),
        ("gateway_tier_remote_fetches", "Ranged reads of tiered segments", t.remote_fetches),
        ("gateway_tier_remote_fetch_bytes", "Bytes read from tiered segments", t.remote_fetch_bytes),
        ("gateway_tier_remote_errors", "Tiered storage calls that failed with the store away", t.remote_errors),
        ("gateway_tier_index_cache_hits", "Segment index reads served from the cache", t.cache_hits),
        ("gateway_tier_index_cache_misses", "Segment index reads from the object store", t.cache_misses),
        ("gateway_tier_read_ahead_hits", "Remote reads served from the read-ahead of an earlier ranged read",
         t.read_ahead_hits),
    ):
        family = CounterMetricFamily(name, doc)
        family.add_metric([], value)
        out.append(family)
    latency = HistogramMetricFamily("gateway_tier_remote_fetch_seconds", "Time a ranged read of a tiered segment took")
    latency.add_metric([], list(zip(_LE, accumulate(t.remote_fetch_buckets), strict=True)), t.remote_fetch_seconds)
    out.append(latency)
    lag = GaugeMetricFamily("gateway_tier_copy_lag_bytes", "Bytes of a tiered topic's log not yet in tiered storage, "
                            "at the tiering role's last pass", labels=["topic"])
    for topic, n in sorted(t.copy_lag_bytes.items()):
        lag.add_metric([topic], n)
    return [*out, lag]


class _Snapshot:
    """A one-shot collector over gauges gathered asynchronously just before rendering."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


class Metrics:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.group_admin = GroupAdmin(services.groups, services.log)

    async def gauges(self) -> list[Metric]:
        topics = await self.services.log.list_topics()
        parts = [(t.name, p) for t in topics for p in range(t.partitions)]
        bounds = await self.services.log.bounds_many(parts) if parts else []
        hw = GaugeMetricFamily("gateway_partition_high_watermark", "Next offset of a partition",
                               labels=["topic", "partition"])
        start = GaugeMetricFamily("gateway_partition_log_start_offset", "First offset still kept",
                                  labels=["topic", "partition"])
        for (t, p), b in zip(parts, bounds, strict=True):
            if b is not None:
                start.add_metric([t, str(p)], b[0])
                hw.add_metric([t, str(p)], b[1])
        count = GaugeMetricFamily("gateway_topics", "Topics", value=len(topics))
        return [*traffic_families(), count, hw, start, *self.memory_gauges(), *await self.replication_gauges(),
                *await self.delayed_gauges(parts),
                *await self.transaction_gauges(), *await self.group_gauges(),
                *await self.watermark_gauges([(t.name, t.partitions) for t in topics]),
                *await share_group_families(self.services.share), *self.client_telemetry_families(),
                *self.quota_families()]

    def client_telemetry_families(self) -> list[Metric]:
        """What Kafka clients pushed here (KIP-714), each metric under its own name, labelled with
        the client's instance id, client id and software name and version beside its own attributes."""
        out: list[Metric] = []
        for fam in self.services.client_metrics.families(now_ms()):
            names = sorted({k for labels, _ in fam.samples for k in labels})
            family: GaugeMetricFamily | CounterMetricFamily = (
                CounterMetricFamily(fam.name, fam.doc, labels=names) if fam.kind == "counter"
                else GaugeMetricFamily(fam.name, fam.doc, labels=names))
            for labels, value in fam.samples:
                family.add_metric([labels.get(n, "") for n in names], value)
            out.append(family)
        return out

    def quota_families(self) -> list[Metric]:
        """Throttling by this gateway per quota and entity (the entity's user and client-id tags, as
        Kafka's quota metrics name them: empty where the quota that bound was not of that part; the
        ip for connection_creation_rate, which counts connections held and closed)."""
        labels = ["quota", "user", "client_id", "ip"]
        count = CounterMetricFamily("gateway_quota_throttled", "Responses (or connections) this gateway throttled for "
                                    "a client quota", labels=labels)
        seconds = CounterMetricFamily("gateway_quota_throttle_seconds",
                                      "Throttle time those responses carried", labels=labels)
        for key, (n, ms) in self.services.quotas.throttled.items():
            count.add_metric(list(key), n)
            seconds.add_metric(list(key), ms / 1000)
        return [count, seconds]

    def memory_gauges(self) -> list[Metric]:
        """Per Redis primary, its memory as last sampled (no round trip of its own): used, maxmemory,
        and the fraction of the produce high-water mark used; whether produce is refused for memory."""
        memory = self.services.memory
        used = GaugeMetricFamily("gateway_redis_memory_used_bytes", "Bytes a Redis primary counts against its maxmemory",
                                 labels=["primary"])
        limit = GaugeMetricFamily("gateway_redis_memory_max_bytes", "maxmemory of a Redis primary (0: none)",
                                  labels=["primary"])
        mark = GaugeMetricFamily("gateway_redis_memory_high_watermark_ratio",
                                 "Used memory over the produce high-water mark (1: produce refused)", labels=["primary"])
        for p in memory.primaries:
            used.add_metric([p.address], p.used)
            limit.add_metric([p.address], p.maxmemory)
            if p.maxmemory:
                mark.add_metric([p.address], p.used / (p.maxmemory * memory.high_watermark))
        refusing = GaugeMetricFamily("gateway_redis_memory_produce_refused",
                                     "1 while produce is refused for Redis's memory (a full or evicting primary)",
                                     value=1 if memory.reason() else 0)
        refused = CounterMetricFamily("gateway_redis_memory_refused_produces",
                                      "Produces refused for Redis's memory", value=memory.refused)
        return [used, limit, mark, refusing, refused]

    async def replication_gauges(self) -> list[Metric]:
        """Per Redis primary, its replicas online; per replica, how far behind it is (the primary's
        replication offset less the one the replica acknowledged, and seconds since it did)."""
        online = GaugeMetricFamily("gateway_redis_replicas", "Replicas online of a Redis primary", labels=["primary"])
        labels = ["primary", "replica", "state"]
        behind = GaugeMetricFamily("gateway_redis_replica_lag_bytes",
                                   "Replication bytes a replica has not acknowledged", labels=labels)
        silent = GaugeMetricFamily("gateway_redis_replica_lag_seconds",
                                   "Seconds since a replica last acknowledged", labels=labels)
        for primary in await self.services.log.replication():
            online.add_metric([primary.address], primary.online)
            for r in primary.replicas:
                behind.add_metric([primary.address, r.address, r.state], r.lag_bytes)
                silent.add_metric([primary.address, r.address, r.state], r.lag_seconds)
        return [online, behind, silent]

    async def group_gauges(self) -> list[Metric]:
        """Per group of either protocol: members and epoch (a classic group's generation), labelled by
        group and type; lag per committed partition (Kafka's consumer lag) and summed per topic.
        The per-topic sum is the family to alert on: its series grow with groups x topics, not with
        partitions, and a `drop` of the per-partition family in the scrape config keeps only it."""
        members = GaugeMetricFamily("gateway_consumer_group_members", "Members of a group",
                                    labels=["group", "type"])
        epoch = GaugeMetricFamily("gateway_consumer_group_epoch",
                                  "Epoch of a consumer group, generation of a classic group", labels=["group", "type"])
        lag = GaugeMetricFamily("gateway_consumer_group_lag", "Records between a group's committed offset and "
                                "the high watermark", labels=["group", "topic", "partition"])
        topic_lag = GaugeMetricFamily("gateway_consumer_group_topic_lag", "A group's lag summed over the "
                                      "partitions of a topic it committed offsets for", labels=["group", "topic"])
        for v in await self.group_admin.all():
            members.add_metric([v.group_id, v.group_type], len(v.members))
            epoch.add_metric([v.group_id, v.group_type], v.group_epoch)
            for o in v.offsets:
                if o.lag is not None:
                    lag.add_metric([v.group_id, o.topic, str(o.partition)], o.lag)
            for topic, n in sorted(v.lag_by_topic().items()):
                topic_lag.add_metric([v.group_id, topic], n)
        return [members, epoch, lag, topic_lag]

    async def delayed_gauges(self, parts: list[tuple[str, int]]) -> list[Metric]:
        labels = ["topic", "partition"]
        waiting = GaugeMetricFamily("gateway_delayed_messages", "Delayed messages waiting", labels=labels)
        buckets = GaugeMetricFamily("gateway_delayed_buckets", "Buckets of the delayed index", labels=labels)
        due = GaugeMetricFamily("gateway_delayed_next_due_ms", "Next delivery time (epoch ms)", labels=labels)
        index = GaugeMetricFamily("gateway_delayed_index_bytes_per_message", "Index memory per delayed message",
                                  labels=labels)
        payload = GaugeMetricFamily("gateway_delayed_payload_bytes_per_message",
                                    "Held payload memory per delayed message", labels=labels)
        for t, p in parts:
            st = await self.services.delay.stats(t, p)
            if not st.messages and not st.pending_transactions:
                continue
            lv = [t, str(p)]
            waiting.add_metric(lv, st.messages)
            buckets.add_metric(lv, st.total_buckets)
            due.add_metric(lv, st.next_due_ms)
            index.add_metric(lv, st.index_bytes_per_message)
            payload.add_metric(lv, st.payload_bytes_per_message)
        return [waiting, buckets, due, index, payload]

    async def transaction_gauges(self) -> list[Metric]:
        now = now_ms()
        keys = await self.services.fence.list()
        n_keys = GaugeMetricFamily("gateway_transaction_keys", "Transaction keys", value=len(keys))
        epoch = GaugeMetricFamily("gateway_transaction_key_epoch", "Current epoch of a transaction key",
                                  labels=["key"])
        age = GaugeMetricFamily("gateway_transaction_key_age_seconds", "Time since a transaction key was created",
                                labels=["key"])
        for k in keys:
            epoch.add_metric([k.name], k.epoch)
            age.add_metric([k.name], max(0, now - k.created_ms) / 1000)
        open_txns = await self.services.txn.open_transactions()
        n_open = GaugeMetricFamily("gateway_open_transactions", "Unfinished transactions", value=len(open_txns))
        oldest = GaugeMetricFamily("gateway_oldest_open_transaction_seconds", "Age of the oldest unfinished one",
                                   value=max((now - t.start_ms for t in open_txns), default=0) / 1000)
        return [n_keys, epoch, age, n_open, oldest]

    async def watermark_gauges(self, topics: list[tuple[str, int]]) -> list[Metric]:
        """Watermarks of partitions (at their last stable offset) and subscriptions (at their
        acknowledged positions) where a producer is in the set; what lookups have cost."""
        wm = self.services.watermark
        labels = ["topic", "partition"]
        parts = GaugeMetricFamily("gateway_watermark_ms", "Watermark of a partition at its last stable offset",
                                  labels=labels)
        producers = GaugeMetricFamily("gateway_watermark_producers", "Producers in a partition's watermark set",
                                      labels=labels)
        subs = GaugeMetricFamily("gateway_subscription_watermark_ms",
                                 "Watermark of a subscription at its acknowledged positions",
                                 labels=["topic", "subscription"])
        for name, n in topics:
            for p, w in (await wm.at(name, dict.fromkeys(range(n), -1))).items():
                if w.watermark is not None:
                    parts.add_metric([name, str(p)], w.watermark)
                    producers.add_metric([name, str(p)], len(w.producers))
            for r in await wm.of_subscriptions(name):
                if r.watermark is not None:
                    subs.add_metric([name, r.name], r.watermark)
        read = CounterMetricFamily("gateway_watermark_index_entries_read",
                                   "Watermark index entries read by lookups on this gateway", value=wm.entries_read)
        return [parts, producers, subs, read]

    async def render(self) -> tuple[bytes, str]:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Snapshot(await self.gauges()))
        return generate_latest(registry), CONTENT_TYPE_LATEST
