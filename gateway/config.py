"""Gateway settings, each defined once: its `Config` field holds the type, default, help text and the
check of its values, and the `gateway serve` flag (`--kafka-port`), the environment fallback
(`GATEWAY_KAFKA_PORT`), their parsing and their errors all follow from that field (`SETTINGS`)."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

T = TypeVar("T")
MiB = 1024 * 1024
ENV_PREFIX = "GATEWAY_"


class ConfigError(ValueError):
    """A setting's value is wrong; the message is one line naming the flag and the variable."""


@dataclass(frozen=True)
class Check:
    """What a setting's values must be: `test` says whether one is, `want` says it in words."""

    test: Callable[[Any], bool]
    want: str
    choices: tuple[str, ...] = ()  # the words a value is made of, when they are few

    def problem(self, value: Any) -> str | None:
        try:
            return None if self.test(value) else self.want
        except (TypeError, AttributeError):  # not even of the setting's type
            return self.want


def between(low: int, high: int) -> Check:
    return Check(lambda v: low <= v <= high, f"between {low} and {high}")


def at_least(low: float) -> Check:
    return Check(lambda v: v >= low, f"at least {low}")  # NaN is at least nothing


def one_of(*choices: str) -> Check:
    return Check(lambda v: v in choices, "one of " + ", ".join(choices), choices)


def some_of(*choices: str) -> Check:
    """A comma-separated list of choices (blank items ignored, as their users do)."""
    return Check(lambda v: all(i.strip() in choices for i in v.split(",") if i.strip()),
                 "a comma-separated list of " + ", ".join(choices), choices)


PORT = between(0, 65535)  # 0: any free port
POSITIVE = Check(lambda v: v > 0, "above 0")
STREAMS_HEARTBEAT_INTERVAL_MS = 5_000  # Kafka's group.streams.heartbeat.interval.ms default, the gateway's
REDIS_URL_SCHEMES = (
    "redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel", "unix")
"""What `gateway.store.connection.connect` takes: one Redis (or a socket), any node of a Redis Cluster, or
the Sentinels of a primary."""
REDIS_URL = Check(lambda v: v == "" or v.partition("://")[0] in REDIS_URL_SCHEMES and "://" in v,
                  "empty (an embedded Redis) or a URL starting " + ", ".join(f"{s}://" for s in REDIS_URL_SCHEMES))
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3}


def machine_memory() -> int:
    """Bytes of memory this process may use: the machine's, or its cgroup's limit when lower (a container)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        return total
    return min(total, int(limit)) if limit.isdigit() else total


def memory_size(value: str) -> int:
    """Bytes for `value`: a fraction of the machine's memory (0 < f <= 1: "0.5"), or bytes as Redis
    writes them ("1073741824", "512mb", "2gb"); ValueError otherwise."""
    text = value.strip().lower()
    number = text.rstrip("kmgb")
    unit = text[len(number):]
    if unit not in _UNITS or not number:
        raise ValueError(value)
    amount = float(number)
    if not math.isfinite(amount):
        raise ValueError(value)
    if unit == "" and 0 < amount <= 1:
        return int(machine_memory() * amount)
    if amount < 1 or amount != int(amount):
        raise ValueError(value)
    return int(amount) * _UNITS[unit]


def _is_memory_size(value: str) -> bool:
    try:
        return memory_size(value) > 0
    except ValueError:
        return False


MEMORY_SIZE = Check(_is_memory_size, "a fraction of the machine's memory (0.5) or bytes (1073741824, 512mb, 2gb)")
FRACTION = Check(lambda v: 0 < v <= 1, "above 0 and at most 1")
LOG_LEVEL = Check(lambda v: v.upper() in logging.getLevelNamesMapping(), "a logging level: DEBUG, INFO, WARNING, ERROR")


def setting(default: T, help: str, *, check: Check | None = None, metavar: str = "", secret: bool = False) -> T:
    """A `Config` field. A secret is set by its variable alone (a flag would show in `ps`) and left out
    of the repr."""
    meta = {"help": help, "check": check, "metavar": metavar, "secret": secret}
    return field(default=default, repr=not secret, metadata=meta)


@dataclass
class Config:
    host: str = setting("127.0.0.1", "address to bind", metavar="HOST")
    kafka_port: int = setting(9092, "Kafka protocol port", check=PORT, metavar="PORT")
    native_port: int = setting(6650, "native protocol port", check=PORT, metavar="PORT")
    admin_port: int = setting(8080, "admin HTTP port", check=PORT, metavar="PORT")
    schema_registry_port: int = setting(8081, "Schema Registry port (Confluent's REST API, served by the first "
                                        "worker as the admin port is); 0: off", check=PORT, metavar="PORT")
    data_dir: Path = setting(Path("./data"), "embedded Redis's files", metavar="DIR")
    redis_url: str = setting("", "use this Redis instead of an embedded one: redis://host:port/db, or "
                             "redis+cluster://host:port for any node of a Redis Cluster, or "
                             "redis+sentinel://host:port,host:port/name for a primary found through Sentinel",
                             check=REDIS_URL,
                             metavar="URL")
    advertised_host: str = setting("", "host Kafka clients are told to use; empty: the host (or 127.0.0.1 when "
                                   "bound to every address)", metavar="HOST")
    advertised_port: int = setting(0, "port Kafka clients are told; 0: the Kafka port", check=PORT, metavar="PORT")
    auto_create_topics: bool = setting(True, "create topics on first use")
    default_partitions: int = setting(1, "partitions of an auto-created topic", check=POSITIVE)
    retention_check_interval: float = setting(30.0, "seconds between retention passes", check=POSITIVE)
    cleaner_interval: float = setting(15.0, "seconds between log cleaner passes over compacted topics",
                                      check=POSITIVE)
    debug_cleaner_stop_at: str = setting("", "debugging: the log cleaner's first pass stops for good at this "
                                         "point (begun: its build stream emptied; added: a first group of "
                                         "cleaned batches written; switching: every batch written, before the "
                                         "switch), for tests that kill the gateway there; empty: never",
                                         check=one_of("", "begun", "added", "switching"), metavar="POINT")
    tier_store: str = setting("", "tiered storage (Kafka's remote.log.storage.system.enable): where topics with "
                              "remote.storage.enable keep their older segments, a directory, file:// URL or s3://bucket/prefix?endpoint=URL; empty: "
                              "<data-dir>/tier with the embedded Redis, none with --redis-url; 'none': off",
                              metavar="LOCATION")
    tier_interval: float = setting(5.0, "seconds between tiering passes (copy to tiered storage, then trim)",
                                   check=POSITIVE)
    debug_tier_stop_at: str = setting("", "debugging: the first tiering pass stops for good at this point (copied: "
                                      "a segment's objects written; listed: it is in the manifest; trimmed: the "
                                      "partition trimmed locally), for tests that kill the gateway there; empty: "
                                      "never", check=one_of("", "copied", "listed", "trimmed"), metavar="POINT")
    max_frame_bytes: int = setting(100 * MiB, "largest request frame; a larger one closes its connection",
                                   check=POSITIVE, metavar="BYTES")
    max_connections: int = setting(10_000, "open connections per listener; more are closed at once",
                                   check=POSITIVE)
    idle_timeout: float = setting(600.0, "seconds without a request (or amid one frame) before a connection "
                                  "closes; 0: never", check=at_least(0))
    tcp_keepalive: float = setting(60.0, "seconds of silence before TCP keepalive probes find a vanished peer; "
                                   "0: off", check=at_least(0))
    fetch_max_bytes: int = setting(55 * MiB, "largest Fetch response, whatever a client asks for",
                                   check=POSITIVE, metavar="BYTES")
    connection_buffer_bytes: int = setting(16 * MiB, "native sends read ahead of their answers, per connection",
                                           check=POSITIVE, metavar="BYTES")
    node_id: int = setting(-1, "this gateway's Kafka broker id, unique among the gateways on one Redis; -1: the "
                           "id its advertised address had, else a new one", check=between(-1, 2**31 - 1))
    lease_ms: int = setting(6000, "how long a gateway that died stays listed and keeps its background roles",
                            check=POSITIVE, metavar="MS")
    workers: int = setting(1, "gateway processes on this machine, started, supervised and stopped together as "
                           "nodes of one cluster: worker i listens on the Kafka and native ports + i (a port 0 "
                           "stays any free port), worker 0 alone serves the admin port; all share the Redis",
                           check=between(1, 1024), metavar="N")
    group_consumer_session_timeout_ms: int = setting(
        45_000, "how long a member of a consumer group (group.protocol=consumer) lives without heartbeats",
        check=POSITIVE, metavar="MS")
    group_consumer_heartbeat_interval_ms: int = setting(
        5_000, "how often members of a consumer group (group.protocol=consumer) are told to heartbeat",
        check=POSITIVE, metavar="MS")
    group_consumer_migration_policy: str = setting(
        "bidirectional", "whether a classic group moves to the consumer protocol as its members roll over "
        "(upgrade), back when the last one of that protocol leaves (downgrade), both, or neither (Kafka's "
        "group.consumer.migration.policy)", check=one_of("disabled", "upgrade", "downgrade", "bidirectional"))
    group_streams_session_timeout_ms: int = setting(
        45_000, "how long a member of a streams group lives without heartbeats when the group sets no "
        "streams.session.timeout.ms (Kafka's group.streams.session.timeout.ms)", check=POSITIVE, metavar="MS")
    group_streams_min_session_timeout_ms: int = setting(
        45_000, "the shortest streams.session.timeout.ms a streams group may set (Kafka's "
        "group.streams.min.session.timeout.ms)", check=POSITIVE, metavar="MS")
    group_streams_max_session_timeout_ms: int = setting(
        60_000, "the longest streams.session.timeout.ms a streams group may set (Kafka's "
        "group.streams.max.session.timeout.ms)", check=POSITIVE, metavar="MS")
    group_share_record_lock_duration_ms: int = setting(
        30_000, "how long a share group's delivered record stays locked to its consumer when the group "
        "sets no share.record.lock.duration.ms (Kafka's group.share.record.lock.duration.ms)",
        check=between(1_000, 3_600_000), metavar="MS")
    group_share_min_record_lock_duration_ms: int = setting(
        15_000, "the shortest share.record.lock.duration.ms a share group may set (Kafka's "
        "group.share.min.record.lock.duration.ms)", check=between(1_000, 30_000), metavar="MS")
    group_share_max_record_lock_duration_ms: int = setting(
        60_000, "the longest share.record.lock.duration.ms a share group may set (Kafka's "
        "group.share.max.record.lock.duration.ms)", check=between(30_000, 3_600_000), metavar="MS")
    group_initial_rebalance_delay_ms: int = setting(
        3_000, "how long the first rebalance of a new classic group waits for more members to join, so "
        "that members starting together share the first assignment (Kafka's group.initial.rebalance.delay.ms)",
        check=at_least(0), metavar="MS")
    auth: bool = setting(False, "require authentication (Kafka SASL, native credentials, admin basic/bearer) "
                         "and ACLs on every listener")
    sasl_mechanisms: str = setting("PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", "Kafka SASL mechanisms offered",
                                   check=some_of("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), metavar="MECH,...")
    super_users: str = setting("", "comma-separated users allowed everything", metavar="USER,...")
    admin_token: str = setting("", "a bearer token the admin API accepts as a super user: the first user's "
                               "way in", secret=True)
    delegation_token_secret_key: str = setting(
        "", "the key of delegation tokens' HMACs (Kafka's delegation.token.secret.key): the same on every "
        "gateway; unset, tokens are off", secret=True)
    delegation_token_expiry_time_ms: int = setting(
        86_400_000, "how long a delegation token lives unless renewed, and the longest renewal (Kafka's "
        "delegation.token.expiry.time.ms)", check=POSITIVE, metavar="MS")
    delegation_token_max_lifetime_ms: int = setting(
        604_800_000, "how long a delegation token lives at most, renewed or not (Kafka's "
        "delegation.token.max.lifetime.ms)", check=POSITIVE, metavar="MS")
    acl_cache_seconds: float = setting(2.0, "how long ACLs read from Redis are trusted before being read again",
                                       check=at_least(0))
    tls_cert_file: str = setting("", "PEM certificate chain: with it every listener speaks TLS", metavar="FILE")
    tls_key_file: str = setting("", "the certificate's private key (PEM)", metavar="FILE")
    redis_fsync: str = setting("everysec", "embedded Redis's appendfsync", check=one_of("always", "everysec", "no"))
    redis_maxmemory: str = setting(
        "0.5", "embedded Redis's maxmemory (with maxmemory-policy noeviction): a fraction of the machine's "
        "memory, or bytes (1073741824, 512mb, 2gb); half leaves room for the copies an AOF rewrite's fork "
        "makes and for the gateway", check=MEMORY_SIZE, metavar="BYTES|FRACTION")
    redis_memory_high_watermark: float = setting(
        0.9, "fraction of each Redis primary's maxmemory at which produce is refused (retriable), keeping the "
        "rest for offset commits, transaction ends, group and share state, retention and deletions",
        check=FRACTION, metavar="FRACTION")
    txn_default_timeout_ms: int = setting(60_000, "timeout of a transaction that names none", check=POSITIVE,
                                          metavar="MS")
    txn_max_timeout_ms: int = setting(900_000, "longest transaction timeout a client may ask for", check=POSITIVE,
                                      metavar="MS")
    txn_reaper_interval: float = setting(1.0, "seconds between passes aborting expired transactions",
                                         check=POSITIVE)
    watermark_snapshot_interval: float = setting(10.0, "seconds between background watermark snapshot passes",
                                                 check=POSITIVE)
    lag_sample_interval: float = setting(15.0, "seconds between samples of every consumer group's lag, kept in "
                                         "Redis for a day (the console's lag chart)", check=POSITIVE)
    watermark_snapshot_marks: int = setting(128, "watermark markers between a partition's snapshots: a lookup "
                                            "reads at most about this many", check=POSITIVE)
    state_min_insync_replicas: int = setting(
        2, "copies, the Redis primary's included, that a state change a client is told is done (committed "
        "offsets, transaction ends and markers, producer fencing, subscription acks, delayed-message moves) "
        "is on before the answer (Kafka's transaction.state.log.min.isr): Redis's WAIT for one fewer "
        "replicas, never more than the primary has had since start, so a single Redis waits for none; 1: "
        "never wait", check=between(1, 64))
    state_replication_timeout_ms: int = setting(
        5_000, "how long a state change waits for its replicas before a retriable error (Kafka's "
        "offsets.commit.timeout.ms)", check=POSITIVE, metavar="MS")
    replica_lag_max_ms: int = setting(
        10_000, "how long a Redis replica may go unheard (INFO replication's lag, whole seconds since its "
        "last acknowledgement, sent every second), or without catching up, and stay in its primary's "
        "in-sync set, whose every "
        "replica acks=all produces, state changes and reads wait for (Kafka's replica.lag.time.max.ms; "
        "Redis's min-replicas-max-lag, 10 s)", check=POSITIVE, metavar="MS")
    unclean_replica_promotion: bool = setting(
        False, "behind Sentinel, let a Redis replica out of its primary's in-sync set stay promotable (Kafka's "
        "unclean.leader.election.enable): by default each gateway gives such a replica replica-priority 0 "
        "until it is back in the set, so a failover never promotes one lacking acknowledged records")
    log_level: str = setting("INFO", "logging level", check=LOG_LEVEL, metavar="LEVEL")

    def __post_init__(self) -> None:
        for s in SETTINGS.values():
            s.check(getattr(self, s.name))
        key, cert = SETTINGS["tls_key_file"], SETTINGS["tls_cert_file"]
        if self.tls_key_file and not self.tls_cert_file:
            raise ConfigError(f"{key.label} needs {cert.label}")
        lock, least, most = (SETTINGS[f"group_share_{k}record_lock_duration_ms"] for k in ("", "min_", "max_"))
        if not self.group_share_min_record_lock_duration_ms <= self.group_share_record_lock_duration_ms:
            raise ConfigError(f"{lock.label} must be at least {least.label} "
                              f"({self.group_share_min_record_lock_duration_ms}), not "
                              f"{self.group_share_record_lock_duration_ms}")
        if not self.group_share_record_lock_duration_ms <= self.group_share_max_record_lock_duration_ms:
            raise ConfigError(f"{lock.label} must be at most {most.label} "
                              f"({self.group_share_max_record_lock_duration_ms}), not "
                              f"{self.group_share_record_lock_duration_ms}")
        self._check_streams_session_timeouts()
        longest = SETTINGS["txn_max_timeout_ms"]
        if self.txn_default_timeout_ms > self.txn_max_timeout_ms:
            raise ConfigError(f"{SETTINGS['txn_default_timeout_ms'].label} must be at most {longest.label} "
                              f"({self.txn_max_timeout_ms}), not {self.txn_default_timeout_ms}")

    def _check_streams_session_timeouts(self) -> None:
        """Kafka 4.4's GroupCoordinatorConfig requirements on these settings, in its order and words;
        the heartbeat interval is Kafka's default (5 s), which the gateway does not change."""
        label = {k: SETTINGS[f"group_streams_{k}session_timeout_ms"].label for k in ("", "min_", "max_")}
        least, most = self.group_streams_min_session_timeout_ms, self.group_streams_max_session_timeout_ms
        session = self.group_streams_session_timeout_ms
        if most < least:
            raise ConfigError(f"{label['max_']} must be greater than or equal to {label['min_']} ({least}), not {most}")
        if session < least:
            raise ConfigError(f"{label['']} must be greater than or equal to {label['min_']} ({least}), not {session}")
        if session > most:
            raise ConfigError(f"{label['']} must be less than or equal to {label['max_']} ({most}), not {session}")
        if session <= STREAMS_HEARTBEAT_INTERVAL_MS:
            raise ConfigError(f"{label['']} must be more than the streams heartbeat interval "
                              f"({STREAMS_HEARTBEAT_INTERVAL_MS}), not {session}")

    @property
    def tier_location(self) -> str:
        """The object store tiered segments go to; "" when tiering is off."""
        if self.tier_store == "none":
            return ""
        if self.tier_store:
            return self.tier_store
        return "" if self.redis_url else str(self.data_dir / "tier")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, /, **overrides: Any) -> Config:
        """Defaults, then `GATEWAY_*` variables (of `environ`, else the process's), then the overrides
        that are not None (the CLI flags that were given)."""
        env = os.environ if environ is None else environ
        values = {s.name: s.parse(env[s.env]) for s in SETTINGS.values() if s.env in env}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @property
    def kafka_advertised(self) -> tuple[str, int]:
        host = self.advertised_host or ("127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host)
        return host, self.advertised_port or self.kafka_port


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")
_METAVARS: dict[type, str] = {bool: "true|false", int: "N", float: "SECONDS", Path: "PATH", str: "TEXT"}


@dataclass(frozen=True)
class Setting:
    """One `Config` field as the outside sees it: its flag, its variable, and the reading of their text."""

    name: str
    kind: type
    default: Any
    help: str
    rule: Check | None
    metavar: str
    secret: bool

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def option(self) -> str | None:
        return None if self.secret else "--" + self.name.replace("_", "-")

    @property
    def label(self) -> str:
        return f"{self.option} ({self.env})" if self.option else self.env

    def describe(self) -> str:
        """The help line: what it is, its default and its variable."""
        shown = self.show(self.default)
        return f"{self.help} ({f'default {shown}; ' if shown else ''}env {self.env})"

    def show(self, value: Any) -> str:
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, int) and self.name.endswith("_bytes") and value and value % MiB == 0:
            return f"{value} = {value // MiB} MiB"
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)

    def parse(self, raw: str) -> Any:
        """The value a flag's or a variable's text stands for (`check` judges it after)."""
        if self.kind is bool:
            word = raw.strip().lower()
            if word not in _TRUE + _FALSE:
                raise ConfigError(f"{self.label} must be true or false, not {raw!r}")
            return word in _TRUE
        if self.kind in (int, float):
            try:
                return self.kind(raw)
            except ValueError:
                kind = "an integer" if self.kind is int else "a number"
                raise ConfigError(f"{self.label} must be {kind}, not {raw!r}") from None
        return self.kind(raw)

    def check(self, value: Any) -> None:
        problem = self.rule.problem(value) if self.rule else None
        if problem:
            shown = repr(value) if isinstance(value, str) else self.show(value)
            raise ConfigError(f"{self.label} must be {problem}, not {shown}")


def _settings() -> dict[str, Setting]:
    hints = get_type_hints(Config)
    out = {}
    for f in fields(Config):
        rule, kind = f.metadata["check"], hints[f.name]
        metavar = f.metadata["metavar"] or "|".join(rule.choices if rule else ()) or _METAVARS[kind]
        out[f.name] = Setting(f.name, kind, f.default, f.metadata["help"], rule, metavar, f.metadata["secret"])
    return out


SETTINGS: dict[str, Setting] = _settings()  # by field name, in the order `Config` defines them
