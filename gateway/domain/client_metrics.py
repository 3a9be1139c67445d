"""KIP-714's client telemetry: the client-metrics subscriptions (the CLIENT_METRICS config resource),
which one a client gets, its pushes checked against its push interval, and the metrics it pushed,
kept for the Prometheus scrape.

Kafka 4.4's ClientMetricsManager, ClientMetricsInstance and ClientMetricsConfigs are followed: the
configs `metrics`, `interval.ms` (100 ms to an hour) and `match` (selectors on the client's instance
id, client id, software name and version, source address and port, each a regular expression the
whole value must match); a client gets the union of the metrics of every subscription it matches at
the shortest of their intervals (five minutes when none matches), and a subscription id that is a
CRC32C of those metrics and that interval XORed with the hash of its instance id. The subscriptions
and each client's push state are Redis's (`store.client_metrics`), so every gateway answers alike.

What a client pushed is this process's alone, as the request counters are (`gateway.telemetry`):
a gateway exports what reached it, as a Kafka broker hands it to its own exporter. A client's
series go with its terminating push, or once twice its push interval passed without one.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import crc32c
from google.protobuf.message import DecodeError
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, MetricsData

from gateway.errors import CorruptMessage, InvalidConfig, InvalidRequest
from gateway.formats.records import Compression, decompress
from gateway.store import Store

from .topic_configs import Change, ConfigDef, Kind, apply

METRICS = "metrics"
INTERVAL_MS = "interval.ms"
MATCH = "match"
INTERVAL_MS_DEFAULT = 5 * 60 * 1000
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 100, 3_600_000
MATCH_PARAMS = ("client_instance_id", "client_id", "client_software_name", "client_software_version",
                "client_source_address", "client_source_port")
ALL_METRICS = "*"
TELEMETRY_MAX_BYTES = 1024 * 1024
"""Kafka's `telemetry.max.bytes` default: the largest push, compressed or not."""
ACCEPTED_COMPRESSION = [Compression.ZSTD, Compression.LZ4, Compression.GZIP, Compression.SNAPPY]
"""ClientMetricsManager's SUPPORTED_COMPRESSION_TYPES, in its order of preference."""
CACHE_EXPIRY_MS = 60_000
"""How long Kafka keeps a silent client instance at the least (three push intervals at the most)."""
MAX_SERIES = 10_000
"""Series one client may have exported: a client pushing ever new attribute values stops there."""


SPECS = {
    METRICS: ConfigDef(METRICS, Kind.LIST, "", "Telemetry metric name prefix list"),
    INTERVAL_MS: ConfigDef(INTERVAL_MS, Kind.INT, str(INTERVAL_MS_DEFAULT), "Metrics push interval in milliseconds"),
    MATCH: ConfigDef(MATCH, Kind.LIST, "", "Client match criteria"),
}
"""ClientMetricsConfigs' three configs, in its order."""


def parse_match(patterns: Iterable[str]) -> dict[str, re.Pattern[str]]:
    """`name=regex` selectors as ClientMetricsConfigs.parseMatchingPatterns splits them (one `=`)."""
    out = {}
    for pattern in patterns:
        parts = pattern.split("=")
        if len(parts) != 2 or parts[0].strip() not in MATCH_PARAMS:
            raise InvalidConfig(f"Illegal client matching pattern: {pattern}")
        try:
            out[parts[0].strip()] = re.compile(parts[1].strip())
        except re.error:
            raise InvalidConfig(f"Illegal client matching pattern: {pattern}") from None
    return out


def _list(value: str) -> list[str]:
    return [i for i in value.split(",") if i]


@dataclass(frozen=True)
class ClientIdentity:
    """What a client's connection says of it, which `match` selectors and the exported labels read."""

    client_id: str
    software_name: str
    software_version: str
    source_address: str
    source_port: int

    def attributes(self, instance: uuid.UUID) -> dict[str, str]:
        return {"client_instance_id": str(instance), "client_id": self.client_id,
                "client_software_name": self.software_name, "client_software_version": self.software_version,
                "client_source_address": self.source_address, "client_source_port": str(self.source_port)}


@dataclass(frozen=True)
class Subscription:
    """What one client is asked for (GetTelemetrySubscriptions' answer)."""

    version: int
    subscription_id: int
    metrics: list[str]
    interval_ms: int


def subscription_id(metrics: list[str], interval_ms: int, instance: uuid.UUID) -> int:
    """ClientMetricsManager.computeSubscriptionId: CRC32C of the metrics as Java prints a set, then
    the interval, XORed with Uuid.hashCode; as a signed int32. The set is printed sorted (Kafka's
    HashSet order differs): the client only echoes the id back."""
    crc = crc32c.crc32c(("[" + ", ".join(metrics) + "]" + str(interval_ms)).encode())
    bits = instance.int
    h = (bits >> 64) ^ (bits & 0xFFFF_FFFF_FFFF_FFFF)
    hashed = ((h >> 32) ^ h) & 0xFFFF_FFFF
    out = crc ^ hashed
    return out - (1 << 32) if out >= 1 << 31 else out


@dataclass
class _Series:
    """One client's exported metrics: family name -> (kind, help, labels -> value)."""

    identity: dict[str, str]
    interval_ms: int
    last_ms: int
    families: dict[str, tuple[str, str, dict[tuple[tuple[str, str], ...], float]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Family:
    """One exported family: kind is 'gauge' or 'counter'; samples are (labels, value)."""

    name: str
    kind: str
    doc: str
    samples: list[tuple[dict[str, str], float]]


_NAME = re.compile(r"[^a-zA-Z0-9_:]")
_LABEL = re.compile(r"[^a-zA-Z0-9_]")


def _label(key: str) -> str:
    """An attribute's key as a Prometheus label name (never a reserved `__` one)."""
    out = _LABEL.sub("_", key).lstrip("_")
    return "attribute_" + out if not out or out[0].isdigit() else out


def _any(v: AnyValue) -> str:
    kind = v.WhichOneof("value")
    return "" if kind is None else str(getattr(v, kind))


class ClientMetricsService:
    def __init__(self, store: Store) -> None:
        self.store = store.client_metrics
        self._series: dict[uuid.UUID, _Series] = {}

    # -- the CLIENT_METRICS config resources ------------------------------------------------------

    async def subscriptions(self) -> tuple[int, dict[str, dict[str, str]]]:
        """(version, name -> the configs set on it)."""
        return await self.store.subscriptions.get()

    async def alter(self, name: str, changes: list[Change], *, incremental: bool, validate_only: bool) -> None:
        """ClientMetricsConfigs.validate's checks; a subscription left with no configs is gone."""
        if not name:
            raise InvalidRequest("Subscription name can't be empty")
        for c in changes:
            if c.name not in SPECS:
                raise InvalidRequest(f"Unknown client metrics configuration: {c.name}")

        def change(current: dict[str, Any]) -> dict[str, Any]:
            configs = apply(current.get(name, {}), changes, SPECS, incremental=incremental)
            interval = int(configs.get(INTERVAL_MS, INTERVAL_MS_DEFAULT))
            if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
                raise InvalidRequest(f"Invalid value {interval} for {INTERVAL_MS}, interval must be between "
                                     f"{MIN_INTERVAL_MS} and {MAX_INTERVAL_MS} (1 hour)")
            parse_match(_list(configs.get(MATCH, "")))
            out = dict(current)
            if configs:
                out[name] = configs
            else:
                out.pop(name, None)
            return out

        if validate_only:
            change((await self.subscriptions())[1])
            return
        await self.store.subscriptions.alter(change)

    def values(self, configs: Mapping[str, str]) -> dict[str, str]:
        """Every config of a subscription, its own value else the default."""
        return {n: configs.get(n, spec.default) for n, spec in SPECS.items()}

    # -- clients ----------------------------------------------------------------------------------

    async def subscription(self, instance: uuid.UUID, who: ClientIdentity) -> Subscription:
        """ClientMetricsManager.createClientInstance: the subscriptions the client matches, merged."""
        version, subs = await self.subscriptions()
        attrs = who.attributes(instance)
        metrics: set[str] = set()
        interval = INTERVAL_MS_DEFAULT
        for configs in subs.values():
            v = self.values(configs)
            selectors = parse_match(_list(v[MATCH]))
            if all(p.fullmatch(attrs[k]) for k, p in selectors.items()):
                metrics.update(_list(v[METRICS]))
                interval = min(interval, int(v[INTERVAL_MS]))
        wanted = [ALL_METRICS] if ALL_METRICS in metrics else sorted(metrics)
        return Subscription(version, subscription_id(wanted, interval, instance), wanted, interval)

    @staticmethod
    def _ttl(sub: Subscription) -> int:
        return max(CACHE_EXPIRY_MS, 3 * sub.interval_ms)

    async def get(self, instance: uuid.UUID, who: ClientIdentity, now: int) -> tuple[Subscription, bool]:
        """The client's subscription, and whether it came too early (THROTTLING_QUOTA_EXCEEDED)."""
        sub = await self.subscription(instance, who)
        verdict = await self.store.get(str(instance), now, sub.version, sub.subscription_id, sub.interval_ms,
                                       self._ttl(sub))
        return sub, verdict == "throttled"

    async def push(self, instance: uuid.UUID, who: ClientIdentity, now: int, pushed_sid: int, terminating: bool,
                   compression: int, payload: bytes) -> str:
        """'ok' (the metrics are exported), else what Kafka refuses the push for: 'terminated',
        'throttled', 'unknown_subscription', 'unsupported_compression', 'too_large', 'invalid_record'."""
        sub = await self.subscription(instance, who)
        data: MetricsData | None = None
        verdict = "ok"
        if compression not in set(Compression):
            verdict = "unsupported_compression"
        elif len(payload) > TELEMETRY_MAX_BYTES:
            verdict = "too_large"
        elif payload:
            try:
                raw = decompress(Compression(compression), payload)
                if len(raw) > TELEMETRY_MAX_BYTES:  # Kafka 4.4 fails its export: INVALID_RECORD
                    verdict = "invalid_record"
                else:
                    data = MetricsData.FromString(raw)
            except (CorruptMessage, DecodeError):
                verdict = "invalid_record"
        out = await self.store.push(str(instance), now, sub.version, sub.subscription_id, sub.interval_ms,
                                    self._ttl(sub), pushed_sid, terminating, verdict)
        if out == "ok" and data is not None:
            self._export(instance, who, sub.interval_ms, now, data)
        if terminating and out != "terminated":
            self._series.pop(instance, None)
        return out

    # -- the exported series ----------------------------------------------------------------------

    def _export(self, instance: uuid.UUID, who: ClientIdentity, interval_ms: int, now: int, data: MetricsData) -> None:
        """Gauges are replaced; sums and histograms of delta temporality (what Kafka asks clients
        for) are added up, so a scrape sees totals as for any Prometheus counter."""
        attrs = who.attributes(instance)
        identity = {k: attrs[k] for k in ("client_instance_id", "client_id", "client_software_name",
                                          "client_software_version")}
        series = self._series.get(instance)
        if series is None:
            series = self._series[instance] = _Series(identity, interval_ms, now)
        series.identity, series.interval_ms, series.last_ms = identity, interval_ms, now
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    self._metric(series, m)

    def _metric(self, series: _Series, m: Any) -> None:
        name = _NAME.sub("_", m.name)
        if not name or name[0].isdigit() or name.startswith("gateway_"):  # not a name, or one of ours
            return
        kind = m.WhichOneof("data")
        points: list[tuple[str, Any, float, bool]] = []  # family suffix, point, value, whether it adds up
        if kind == "gauge":
            points = [("", p, self._number(p), False) for p in m.gauge.data_points]
        elif kind == "sum":
            delta = m.sum.aggregation_temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
            points = [("", p, self._number(p), delta) for p in m.sum.data_points]
        elif kind == "histogram":
            delta = m.histogram.aggregation_temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
            for p in m.histogram.data_points:
                points += [("_count", p, float(p.count), delta), ("_sum", p, p.sum, delta)]
        else:
            return
        family_kind = "counter" if kind == "sum" and m.sum.is_monotonic else "gauge"
        for suffix, p, value, adds in points:
            labels = {_label(a.key): _any(a.value) for a in p.attributes}
            labels.update(series.identity)
            _, _, samples = series.families.setdefault(name + suffix, (family_kind, m.description or m.name, {}))
            key = tuple(sorted(labels.items()))
            if key not in samples and sum(len(f[2]) for f in series.families.values()) >= MAX_SERIES:
                continue
            samples[key] = samples.get(key, 0.0) + value if adds else value

    @staticmethod
    def _number(p: Any) -> float:
        return float(p.as_int) if p.WhichOneof("value") == "as_int" else float(p.as_double)

    def families(self, now: int) -> list[Family]:
        """Every live client's metrics, one family per metric name; a client silent for twice its
        push interval is dropped first."""
        for instance, s in list(self._series.items()):
            if now - s.last_ms > 2 * s.interval_ms:
                del self._series[instance]
        merged: dict[str, Family] = {}
        for s in self._series.values():
            for name, (kind, doc, samples) in s.families.items():
                fam = merged.setdefault(name, Family(name, kind, doc, []))
                fam.samples.extend((dict(k), v) for k, v in samples.items())
        return [merged[n] for n in sorted(merged)]
