"""Prometheus metrics: counters the faces bump as they work, and gauges read from Redis per scrape."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gateway.clock import now_ms
from gateway.domain.services import Services

REGISTRY = CollectorRegistry(auto_describe=True)

REQUESTS = Counter("gateway_requests", "Requests handled", ["face", "api"], registry=REGISTRY)
REQUEST_ERRORS = Counter("gateway_request_errors", "Requests answered with an error", ["face", "api"],
                         registry=REGISTRY)
PRODUCED_BYTES = Counter("gateway_produced_bytes", "Record batch bytes appended", ["face"], registry=REGISTRY)
FETCHED_BYTES = Counter("gateway_fetched_bytes", "Record batch bytes sent to consumers", ["face"],
                        registry=REGISTRY)
LATENCY = Histogram("gateway_request_seconds", "Request handling time", ["face", "api"], registry=REGISTRY,
                    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5))



class _Snapshot:
    """A one-shot collector over gauges gathered asynchronously just before rendering."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


class Metrics:
    def __init__(self, services: Services) -> None:
        self.services = services

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
        return [count, hw, start, *await self.delayed_gauges(parts), *await self.transaction_gauges(),
                *await self.watermark_gauges([(t.name, t.partitions) for t in topics])]

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
        return generate_latest(REGISTRY) + generate_latest(registry), CONTENT_TYPE_LATEST
