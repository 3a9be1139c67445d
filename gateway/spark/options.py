"""The connector's options, checked once on the driver, with Kafka's Spark names where they exist.

Offsets are kept as Spark keeps them in its checkpoint: `{"topic": {"partition": offset}}`, the
partition as a string (JSON object keys are strings).
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.client import PartitionInfo
from gateway.client.client import parse_url

Offsets = dict[str, dict[str, int]]

EARLIEST, LATEST = -2, -1  # in an offsets JSON, as in Kafka's
DEFAULT_MAX_BYTES = 4 << 20
# A task's transaction stays open until the driver commits the micro-batch; one left by a task that
# died times out after this and holds readers' last stable offset until then.
DEFAULT_TXN_TIMEOUT_MS = 300_000


class OptionError(ValueError):
    """An option is missing or malformed; raised on the driver before anything runs."""


def _get(options: Mapping[str, str], name: str) -> str | None:
    """Options arrive case-insensitive from Spark; plain dicts (tests, users) may use any case."""
    for k, v in options.items():
        if k.lower() == name.lower():
            return v
    return None


@dataclass(frozen=True)
class Endpoint:
    """Where the gateway listens and how to log in; picklable, so each task connects with it itself."""

    url: str
    username: str = ""
    password: str = field(default="", repr=False)
    token: str = field(default="", repr=False)
    tls: bool = False
    tls_ca_file: str = ""

    def connect_args(self) -> dict[str, Any]:
        """Client.connect's credentials and TLS arguments."""
        context = ssl.create_default_context(cafile=self.tls_ca_file or None) if self.tls else None
        return {"username": self.username or None, "password": self.password or None, "token": self.token or None,
                "ssl": context}


def _endpoint(options: Mapping[str, str]) -> Endpoint:
    url = _get(options, "url")
    if not url:
        raise OptionError('option "url" is required: the gateway\'s native address, gateway://host:6650')
    try:
        parse_url(url)
    except ValueError as exc:
        raise OptionError(f'option "url": {exc}') from None
    ca_file = _get(options, "tlsCaFile") or ""
    return Endpoint(url, _get(options, "username") or "", _get(options, "password") or "", _get(options, "token") or "",
                    _bool(options, "tls", bool(ca_file)), ca_file)


def _int(options: Mapping[str, str], name: str, default: int | None, minimum: int = 1) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f'option "{name}" must be an integer, not {raw!r}') from None
    if value < minimum:
        raise OptionError(f'option "{name}" must be at least {minimum}')
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false"):
        raise OptionError(f'option "{name}" must be true or false, not {raw!r}')
    return raw.lower() == "true"


PositionSpec = str | dict[str, dict[str, int]]


def _position(options: Mapping[str, str], name: str, default: str, topics: tuple[str, ...]) -> PositionSpec:
    """"earliest", "latest", or a JSON object of offsets per topic and partition (-2 earliest, -1 latest)."""
    raw = _get(options, name)
    if raw is None or raw.strip().lower() in ("earliest", "latest"):
        return (raw or default).strip().lower()
    try:
        spec: Any = json.loads(raw)
        if not isinstance(spec, dict):
            raise ValueError("not an object")
        out = {str(t): {str(int(p)): int(o) for p, o in parts.items()} for t, parts in spec.items()}
    except (ValueError, TypeError, AttributeError) as exc:
        raise OptionError(
            f'option "{name}" must be earliest, latest or JSON like {{"topic": {{"0": 42, "1": -2}}}} '
            f"({exc})"
        ) from None
    unknown = set(out) - set(topics)
    if unknown:
        raise OptionError(f'option "{name}" names topics not read: {", ".join(sorted(unknown))}')
    if any(o < EARLIEST for parts in out.values() for o in parts.values()):
        raise OptionError(f'option "{name}": an offset is -2 (earliest), -1 (latest) or at least 0')
    return out


def resolve(spec: PositionSpec, bounds: Mapping[str, list[PartitionInfo]], default: str) -> Offsets:
    """Concrete offsets for every partition: earliest is the log start, latest the last stable offset;
    partitions a JSON spec leaves out take `default`."""
    fallback = EARLIEST if (spec if isinstance(spec, str) else default) == "earliest" else LATEST
    out: Offsets = {}
    for topic, infos in bounds.items():
        given = spec.get(topic, {}) if isinstance(spec, dict) else {}
        out[topic] = {}
        for info in infos:
            want = given.get(str(info.partition), fallback)
            if want == EARLIEST:
                offset = info.log_start
            elif want == LATEST:
                offset = info.last_stable_offset
            else:
                offset = want
            out[topic][str(info.partition)] = offset
    return out


@dataclass(frozen=True)
class SourceOptions:
    gateway: Endpoint
    topics: tuple[str, ...]
    starting: PositionSpec
    ending: PositionSpec
    max_records_per_trigger: int | None
    fail_on_data_loss: bool
    max_bytes_per_read: int
    emit_watermarks: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
        gateway = _endpoint(options)
        raw = _get(options, "topic") or ""
        topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
        if not topics:
            raise OptionError('option "topic" is required: one topic, or several separated by commas')
        emit_watermarks = _bool(options, "emitWatermarks", False)
        if emit_watermarks and not streaming:
            raise OptionError('option "emitWatermarks" is for streams (spark.readStream)')
        if streaming and _get(options, "endingOffsets") is not None:
            raise OptionError('option "endingOffsets" is for batch reads (spark.read); a stream has no end')
        ending = _position(options, "endingOffsets", "latest", topics)
        if ending == "earliest":
            raise OptionError('option "endingOffsets" may not be earliest')
        return cls(
            gateway=gateway,
            topics=topics,
            starting=_position(options, "startingOffsets", "latest" if streaming else "earliest", topics),
            ending=ending,
            max_records_per_trigger=_int(options, "maxRecordsPerTrigger", None),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            max_bytes_per_read=_int(options, "maxBytesPerRead", DEFAULT_MAX_BYTES) or DEFAULT_MAX_BYTES,
            emit_watermarks=emit_watermarks,
        )


@dataclass(frozen=True)
class SinkOptions:
    gateway: Endpoint
    topic: str | None  # rows without a topic column go here
    transaction_timeout_ms: int

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        topic = (_get(options, "topic") or "").strip() or None
        if topic is not None and "," in topic:
            raise OptionError('option "topic" names one topic for the sink; a "topic" column picks one per row')
        timeout = _int(options, "transactionTimeoutMs", DEFAULT_TXN_TIMEOUT_MS) or DEFAULT_TXN_TIMEOUT_MS
        return cls(_endpoint(options), topic, timeout)
