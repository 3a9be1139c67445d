"""Every topic config of Kafka 4.4, defined once: name, type, default, validation, documentation,
whether it takes effect here, and the broker config that holds its cluster-wide default; in the
order of Kafka's definitions (LogConfig's ConfigDef), which decides the order Kafka lists them in,
then the gateway's own.

Followed: Kafka's `LogConfig` (storage/.../log/LogConfig.java: the ConfigDef of each topic config,
its type, default and validator, and `validateValues`), `ServerTopicConfigSynonyms` (the broker
name of each topic config's default) and `ConfigurationControlManager` (IncrementalAlterConfigs'
SET, DELETE, APPEND and SUBTRACT). Configs without meaning here are kept, reported and listed as
such (`effective=False`), never refused, except where Kafka itself refuses them on a cluster like
this one (remote storage on a cluster without tiered storage).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from gateway.errors import InvalidConfig, InvalidRequest

INT_MAX, LONG_MAX = 2**31 - 1, 2**63 - 1


class Kind(IntEnum):
    """A config's type, numbered as DescribeConfigs reports it (KIP-569)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class Op(IntEnum):
    """IncrementalAlterConfigs' operations."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


_BOUNDS = {Kind.INT: (-(2**31), INT_MAX), Kind.SHORT: (-(2**15), 2**15 - 1), Kind.LONG: (-(2**63), LONG_MAX)}


@dataclass(frozen=True)
class ConfigDef:
    """One config: `check` turns a value as given into the value kept, or raises InvalidConfig."""

    name: str
    kind: Kind
    default: str
    doc: str
    effective: bool = False
    broker: str | None = None  # the broker config holding the cluster-wide default, if Kafka has one
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    rule: Callable[[str], str | None] | None = None  # a further check: what is wrong, or None
    # where Kafka's default comes from when its broker config has none of its own (name, value):
    # log.retention.ms has none, log.retention.hours holds it
    broker_fallback: tuple[str, str] | None = None
    own: bool = False  # the gateway's own, which Kafka has not
    # a group config's bounds from the broker's settings, checked after low and high as Kafka 4.4's
    # GroupConfig.validateIntRange checks them after its ConfigDef's, in its words
    within: tuple[int, int] | None = None

    def check(self, value: str) -> str:
        kept = self._parse(value.strip())
        problem = self.rule(kept) if self.rule else None
        if problem:
            raise InvalidConfig(f"Invalid value {value} for configuration {self.name}: {problem}")
        return kept

    def _parse(self, value: str) -> str:
        bad = f"Invalid value {value} for configuration {self.name}"
        if self.kind is Kind.BOOLEAN:
            if value.lower() not in ("true", "false"):
                raise InvalidConfig(f"{bad}: Expected value to be either true or false")
            return value.lower()
        if self.kind is Kind.LIST:
            items = [i.strip() for i in value.split(",")] if value else []
            for item in items:
                if self.choices and item not in self.choices:
                    raise InvalidConfig(f"{bad}: String must be one of: {', '.join(self.choices)}")
            if len(set(items)) != len(items):
                raise InvalidConfig(f"{bad}: Configuration has duplicate values")
            return ",".join(items)
        if self.kind is Kind.STRING:
            if self.choices and value not in self.choices:
                raise InvalidConfig(f"{bad}: String must be one of: {', '.join(self.choices)}")
            return value
        number: float
        try:
            number = float(value) if self.kind is Kind.DOUBLE else int(value)
        except ValueError:
            raise InvalidConfig(f"{bad}: Not a number of type {self.kind.name}") from None
        if self.kind is Kind.DOUBLE and not math.isfinite(number):
            raise InvalidConfig(f"{bad}: Not a number of type DOUBLE")
        lo, hi = _BOUNDS.get(self.kind, (-math.inf, math.inf))
        if not lo <= number <= hi:
            raise InvalidConfig(f"{bad}: Not a number of type {self.kind.name}")
        if self.low is not None and number < self.low:
            raise InvalidConfig(f"{bad}: Value must be at least {_num(self.low)}")
        if self.high is not None and number > self.high:
            raise InvalidConfig(f"{bad}: Value must be no more than {_num(self.high)}")
        if self.within is not None and not self.within[0] <= number <= self.within[1]:
            raise InvalidConfig(f"{self.name} must be in the range {self.within[0]} to {self.within[1]} inclusive.")
        return str(number)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


_THROTTLED = re.compile(r"^(\*|\d+:\d+(,\d+:\d+)*)?$")


def _throttled(value: str) -> str | None:
    """Kafka's ThrottledReplicaListValidator: `*`, or partition:broker pairs."""
    return None if _THROTTLED.match(value) else "must be the literal '*' or a list of replicas in the format [PartitionId]:[BrokerId],..."


def _level(low: int, high: int, default: int) -> Callable[[str], str | None]:
    """Kafka's compression level validators: a level in [low, high], or the codec's default."""

    def rule(value: str) -> str | None:
        n = int(value)
        return None if low <= n <= high or n == default else f"Value must be between {low} and {high}"

    return rule


_NO_EFFECT = {
    "compression": "batches are stored as the producer compressed them",
    "segment": "the log is a Redis stream: there are no segment files",
    "flush": "Redis's persistence (appendfsync) decides when data reaches disk",
    "replicas": "Redis's replication decides durability; every live gateway serves every partition",
    "timestamps": "record timestamps are not checked against the broker's clock",
    "decompressed": "batches are stored as the producer compressed them, and no record's decompressed size is "
                    "checked",
    "dead_letter": "a share group's dead-letter topic (the group config share.dead.letter.topic) needs no flag on "
                   "the topic",
}


def _topic(name: str, kind: Kind, default: object, doc: str, *, effective: bool = False, why: str = "",
           broker: str | None = None, low: float | None = None, high: float | None = None,
           choices: tuple[str, ...] = (), rule: Callable[[str], str | None] | None = None,
           broker_fallback: tuple[str, str] | None = None, own: bool = False) -> ConfigDef:
    text = doc if effective else f"{doc} Accepted without effect here: {_NO_EFFECT[why]}."
    shown = str(default).lower() if isinstance(default, bool) else str(default)
    return ConfigDef(name, kind, shown, text, effective, broker, low, high, choices, rule, broker_fallback, own)


_B, _I, _L, _S, _D, _LI = Kind.BOOLEAN, Kind.INT, Kind.LONG, Kind.STRING, Kind.DOUBLE, Kind.LIST
_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

TOPIC_CONFIGS: dict[str, ConfigDef] = {c.name: c for c in (
    _topic("segment.bytes", _I, 1_073_741_824, "The size of a segment file: on a topic with remote storage, "
           "of the segments copied to tiered storage (the log itself is a Redis stream).", effective=True,
           broker="log.segment.bytes", low=1_048_576),
    _topic("segment.ms", _L, 604_800_000, "The time after which a segment rolls: on a topic with remote "
           "storage, after which a range not yet segment.bytes long is copied to tiered storage.", effective=True,
           broker="log.roll.ms",
           broker_fallback=("log.roll.hours", "168"), low=1),
    _topic("segment.jitter.ms", _L, 0, "Random jitter of segment rolls.", why="segment",
           broker="log.roll.jitter.ms",
           broker_fallback=("log.roll.jitter.hours", "0"), low=0),
    _topic("segment.index.bytes", _I, 10_485_760, "The size of a segment's offset index.", why="segment",
           broker="log.index.size.max.bytes", low=4),
    _topic("flush.messages", _L, LONG_MAX, "Messages between forced flushes of the log to disk.",
           why="flush", broker="log.flush.interval.messages", low=1),
    _topic("flush.ms", _L, LONG_MAX, "Milliseconds between forced flushes of the log to disk.",
           why="flush", broker="log.flush.interval.ms",
           broker_fallback=("log.flush.scheduler.interval.ms", str(LONG_MAX)), low=0),
    _topic("retention.bytes", _L, -1, "The most bytes a partition keeps before its oldest batches are "
           "deleted; -1: no limit.", effective=True, broker="log.retention.bytes"),
    _topic("retention.ms", _L, 604_800_000, "How long batches are kept before they are deleted; -1: no "
           "limit.", effective=True, broker="log.retention.ms",
           broker_fallback=("log.retention.hours", "168"), low=-1),
    _topic("max.message.bytes", _I, 1_048_588, "The largest record batch the topic accepts.", effective=True,
           broker="message.max.bytes", low=0),
    _topic("max.decompressed.message.bytes", _I, 2_147_483_639, "The largest decompressed record the topic "
           "accepts.", why="decompressed", broker="max.decompressed.message.bytes", low=1, high=2_147_483_639),
    _topic("index.interval.bytes", _I, 4096, "Bytes between offset index entries.",
           why="segment", broker="log.index.interval.bytes", low=0),
    _topic("delete.retention.ms", _L, 86_400_000, "How long delete tombstones of a compacted topic are kept "
           "after the cleaner first passes them.", effective=True, broker="log.cleaner.delete.retention.ms", low=0),
    _topic("min.compaction.lag.ms", _L, 0, "The least time a record stays uncompacted.",
           effective=True, broker="log.cleaner.min.compaction.lag.ms", low=0),
    _topic("max.compaction.lag.ms", _L, LONG_MAX, "The longest a record stays ineligible for compaction.",
           effective=True, broker="log.cleaner.max.compaction.lag.ms", low=1),
    _topic("file.delete.delay.ms", _L, 60_000, "How long a deleted segment file waits before it goes.",
           why="segment", broker="log.segment.delete.delay.ms", low=0),
    _topic("min.cleanable.dirty.ratio", _D, 0.5, "The dirty share of the log that starts a cleaning.",
           effective=True, broker="log.cleaner.min.cleanable.ratio", low=0, high=1),
    _topic("cleanup.policy", _LI, "delete", "The retention policy of old data: delete (by retention.ms and "
           "retention.bytes), compact (the latest record of each key is kept, by the log cleaner), or both; "
           "an empty list keeps everything.", effective=True, broker="log.cleanup.policy",
           choices=("compact", "delete")),
    _topic("unclean.leader.election.enable", _B, False, "Whether a replica out of sync may lead.",
           why="replicas", broker="unclean.leader.election.enable"),
    _topic("min.insync.replicas", _I, 1, "Copies that must hold a write before acks=all succeeds: Redis "
           "and N-1 of its replicas (Redis's WAIT, within the request's timeout; fewer replicas online "
           "refuse the write up front).", effective=True, broker="min.insync.replicas", low=1),
    _topic("compression.type", _S, "producer", "The final compression codec of the topic's batches.",
           why="compression", broker="compression.type", choices=_COMPRESSION),
    _topic("compression.gzip.level", _I, -1, "The gzip level when compression.type is gzip.",
           why="compression", broker="compression.gzip.level", rule=_level(1, 9, -1)),
    _topic("compression.lz4.level", _I, 9, "The lz4 level when compression.type is lz4.",
           why="compression", broker="compression.lz4.level", rule=_level(1, 17, 9)),
    _topic("compression.zstd.level", _I, 3, "The zstd level when compression.type is zstd.",
           why="compression", broker="compression.zstd.level", rule=_level(-131072, 22, 3)),
    _topic("preallocate", _B, False, "Preallocate segment files on disk.", why="segment",
           broker="log.preallocate"),
    _topic("message.timestamp.type", _S, "CreateTime", "CreateTime keeps the producer's timestamps; "
           "LogAppendTime stamps each batch with the time it is appended.", effective=True,
           broker="log.message.timestamp.type", choices=("CreateTime", "LogAppendTime")),
    _topic("message.timestamp.before.max.ms", _L, LONG_MAX, "How far in the past a CreateTime record's "
           "timestamp may be.", why="timestamps", broker="log.message.timestamp.before.max.ms", low=0),
    _topic("message.timestamp.after.max.ms", _L, 3_600_000, "How far in the future a CreateTime record's "
           "timestamp may be.", why="timestamps", broker="log.message.timestamp.after.max.ms", low=0),
    _topic("leader.replication.throttled.replicas", _LI, "", "Replicas whose leader replication is "
           "throttled: '*' or partition:broker pairs.", why="replicas", rule=_throttled),
    _topic("follower.replication.throttled.replicas", _LI, "", "Replicas whose follower replication is "
           "throttled: '*' or partition:broker pairs.", why="replicas", rule=_throttled),
    _topic("remote.storage.enable", _B, False, "Keep older segments in tiered storage (the gateway's "
           "--tier-store), the recent head in Redis.", effective=True),
    _topic("local.retention.ms", _L, -2, "Milliseconds kept in Redis once copied to tiered storage; -2: "
           "retention.ms.", effective=True, broker="log.local.retention.ms", low=-2),
    _topic("local.retention.bytes", _L, -2, "Bytes kept in Redis once copied to tiered storage; -2: "
           "retention.bytes.", effective=True, broker="log.local.retention.bytes", low=-2),
    _topic("remote.log.copy.disable", _B, False, "Stop copying segments to tiered storage (reads and retention "
           "of those there go on).", effective=True),
    _topic("remote.copy.lag.ms", _L, 0, "How long a closed segment waits before it is copied to tiered storage; "
           "-1: local.retention.ms.", effective=True, broker="log.remote.copy.lag.ms", low=-1),
    _topic("remote.copy.lag.bytes", _L, -1, "Bytes of newer data a closed segment waits for before it is copied "
           "to tiered storage; -1: local.retention.bytes.", effective=True, broker="log.remote.copy.lag.bytes",
           low=-1),
    _topic("remote.log.delete.on.disable", _B, False, "Delete tiered data when remote.storage.enable is turned "
           "off.", effective=True),
    _topic("errors.deadletterqueue.group.enable", _B, False, "Let share groups write undeliverable records to "
           "this topic as their dead-letter queue.", why="dead_letter"),
    # the gateway's own
    _topic("delayed.delivery.enable", _B, False, "Honour delay headers: records wait for their time.",
           effective=True, own=True),
    _topic("watermark.idle.timeout.ms", _L, -1, "Mark idle a watermark producer silent this long; -1 (or 0) "
           "never.", effective=True, low=-1, own=True),
)}

REPLICATION_THROTTLES = frozenset({"leader.replication.throttled.rate", "follower.replication.throttled.rate",
                                   "replica.alter.log.dirs.io.max.bytes.per.second"})
"""Kafka's broker-level replication throttles. Redis replicates, so the gateways keep none, and
deleting one (what `kafka-reassign-partitions --verify` does when a reassignment is done) does
nothing, as deleting an unset config does nothing on Kafka; setting one is refused."""

BROKER_DEFAULTS: dict[str, ConfigDef] = {
    c.broker: c for c in TOPIC_CONFIGS.values() if c.broker is not None
}
"""The broker configs that hold the cluster-wide defaults of topic configs, by broker name: the ones
that change at run time (Kafka's DynamicLogConfig), kept in Redis for every gateway."""


def resolve(topic: Mapping[str, str], cluster: Mapping[str, str]) -> dict[str, str]:
    """Every topic config's value: the topic's own, else the cluster-wide default, else Kafka's."""
    out = {}
    for name, spec in TOPIC_CONFIGS.items():
        if name in topic:
            out[name] = topic[name]
        elif spec.broker is not None and spec.broker in cluster:
            out[name] = cluster[spec.broker]
        else:
            out[name] = spec.default
    return out


def validate_topic_config(config: Mapping[str, str | None]) -> dict[str, str]:
    """The values to keep of `config` (None: reset), each checked; unknown names are refused."""
    out: dict[str, str] = {}
    for name, value in config.items():
        spec = TOPIC_CONFIGS.get(name)
        if spec is None:
            raise _unknown_topic_config(name)
        if value is not None:
            out[name] = spec.check(value)
    check_together(resolve(out, {}))
    return out


def check_together(values: Mapping[str, str]) -> None:
    """Kafka's `LogConfig.validateValues`: rules over several configs."""
    low, high = values.get("min.compaction.lag.ms"), values.get("max.compaction.lag.ms")
    if low is not None and high is not None and int(low) > int(high):
        raise InvalidConfig(f"conflict topic config setting min.compaction.lag.ms ({low}) > "
                            f"max.compaction.lag.ms ({high})")
    if values.get("delayed.delivery.enable") == "true" and "compact" in values.get("cleanup.policy", "").split(","):
        # the gateway's own rule: a held record would enter the log past the produce-time key check,
        # and a delay has no meaning for a table of latest values
        raise InvalidConfig("delayed.delivery.enable cannot be true on a topic whose cleanup.policy has compact")


def check_remote(values: Mapping[str, str], *, system_enabled: bool, was_enabled: bool = False) -> None:
    """Kafka 4.4's rules for remote storage (LogConfig.validateTopicLogConfigValues, in its order;
    the messages as its 4.4.0 jar has them): only with the broker's tiered storage on, only under
    cleanup.policy delete (or none), local retention within retention, copy lags within local
    retention, local retention equal to retention once copying is disabled, and turned off only with
    its data deleted. `values` are the topic's resolved configs."""
    enabled = values.get("remote.storage.enable") == "true"
    if was_enabled and not enabled and values.get("remote.log.delete.on.disable") != "true":
        raise InvalidConfig(
            "It is invalid to disable remote storage without deleting remote data. If you want to keep the remote "
            "data and turn to read only, please set `remote.storage.enable=true,remote.log.copy.disable=true`. If "
            "you want to disable remote storage and delete all remote data, please set "
            "`remote.storage.enable=false,remote.log.delete.on.disable=true`.")
    if not enabled:
        return
    if not system_enabled:
        raise InvalidConfig("Tiered Storage functionality is disabled in the broker. Topic cannot be configured "
                            "with remote log storage.")
    if values.get("cleanup.policy", "") not in ("", "delete"):
        raise InvalidConfig("Remote log storage only supports topics with cleanup.policy=delete or cleanup.policy "
                            "being an empty list.")
    for kind in ("bytes", "ms"):
        total, local = int(values[f"retention.{kind}"]), int(values[f"local.retention.{kind}"])
        if total != -1 and local != -2:
            name = f"local.retention.{kind}"
            if local == -1:
                raise InvalidConfig(f"Invalid value -1 for configuration {name}: Value must not be -1 as "
                                    f"retention.{kind} value is set as {total}.")
            if local > total:
                raise InvalidConfig(f"Invalid value {local} for configuration {name}: Value must not be more "
                                    f"than retention.{kind} property value: {total}")
    for kind in ("bytes", "ms"):  # validateRemoteCopyLagSize, then validateRemoteCopyLagTime
        local, lag = int(values[f"local.retention.{kind}"]), int(values[f"remote.copy.lag.{kind}"])
        effective = int(values[f"retention.{kind}"]) if local == -2 else local
        if lag > 0 and effective >= 0 and lag > effective:
            raise InvalidConfig(f"Invalid value {lag} for configuration remote.copy.lag.{kind}: Value must not exceed "
                                f"local.retention.{kind} (effective value: {effective})")
    if values.get("remote.log.copy.disable") == "true":
        for kind in ("bytes", "ms"):
            local = int(values[f"local.retention.{kind}"])
            if local != -2 and local != int(values[f"retention.{kind}"]):
                raise InvalidConfig(f"When `remote.log.copy.disable` is set to true, the `local.retention.{kind}` and "
                                    f"`retention.{kind}` must be set to the identical value because there will be no "
                                    "more logs copied to the remote storage.")


def local_retention(values: Mapping[str, str]) -> tuple[int, int]:
    """(ms, bytes) a tiered topic keeps in Redis: local.retention.*, -2 following retention.*."""
    ms, size = int(values["local.retention.ms"]), int(values["local.retention.bytes"])
    return (int(values["retention.ms"]) if ms == -2 else ms, int(values["retention.bytes"]) if size == -2 else size)


@dataclass(frozen=True)
class Change:
    """One IncrementalAlterConfigs operation (or, with SET and DELETE, one AlterConfigs entry)."""

    name: str
    op: Op
    value: str | None


def _unknown_topic_config(name: str) -> Exception:
    return InvalidConfig(f"Unknown topic config name: {name}")


def apply(current: Mapping[str, str], changes: Iterable[Change], specs: Mapping[str, ConfigDef], *,
          incremental: bool = True, unknown: Callable[[str], Exception] = _unknown_topic_config) -> dict[str, str]:
    """The configs after `changes`, each checked: incremental keeps what is not named, otherwise (AlterConfigs)
    the set is replaced. APPEND and SUBTRACT work on the current list (else the default) as Kafka's
    controller does: an item already there is not added twice, one absent is not an error."""
    out = dict(current) if incremental else {}
    seen: set[str] = set()
    for c in changes:
        if c.name in seen:
            raise InvalidRequest(f"Error due to duplicate config keys: {c.name}")
        seen.add(c.name)
        spec = specs.get(c.name)
        if spec is None:
            raise unknown(c.name)
        if c.op is Op.DELETE or (c.op is Op.SET and c.value is None):
            out.pop(c.name, None)
            continue
        if c.op in (Op.APPEND, Op.SUBTRACT):
            if spec.kind is not Kind.LIST:
                raise InvalidConfig(f"Can't {c.op.name} to key {c.name} because its type is not LIST.")
            old = current.get(c.name, spec.default)
            items = [i for i in old.split(",") if i]
            given = [i.strip() for i in (c.value or "").split(",") if i.strip()]
            if c.op is Op.APPEND:
                items += [i for i in given if i not in items]
            else:
                items = [i for i in items if i not in given]
            out[c.name] = spec.check(",".join(items))
        else:
            out[c.name] = spec.check(c.value or "")
    return out
