"""Gateway settings: one dataclass, each field settable by a CLI flag or a `GATEWAY_*` variable."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


def _env(name: str, default: Any) -> Any:
    """The environment's value for `name`, converted to the default's type."""
    raw = os.environ.get(f"GATEWAY_{name.upper()}")
    if raw is None:
        return default
    if isinstance(default, bool):
        return raw.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        return int(raw)
    if isinstance(default, float):
        return float(raw)
    if isinstance(default, Path):
        return Path(raw)
    return raw


@dataclass
class Config:
    host: str = "127.0.0.1"
    kafka_port: int = 9092
    native_port: int = 6650
    admin_port: int = 8080
    data_dir: Path = field(default_factory=lambda: Path("./data"))
    redis_url: str = ""  # empty: start the embedded redis-server in data_dir
    advertised_host: str = ""  # empty: the host (or 127.0.0.1 when bound to every address)
    advertised_port: int = 0  # 0: the Kafka port
    auto_create_topics: bool = True
    default_partitions: int = 1
    retention_check_interval: float = 30.0
    max_frame_bytes: int = 100 * 1024 * 1024  # a larger request closes its connection
    max_connections: int = 10_000  # per listener; connections beyond it are closed at once
    idle_timeout: float = 600.0  # seconds without a request (or amid one frame) before closing; 0: never
    tcp_keepalive: float = 60.0  # seconds of silence before keepalive probes find a vanished peer; 0: off
    fetch_max_bytes: int = 55 * 1024 * 1024  # the largest Fetch response, whatever a client asks for
    connection_buffer_bytes: int = 16 * 1024 * 1024  # native sends read ahead of their answers, per connection
    node_id: int = -1  # -1: the id this advertised Kafka address had before, else a new one from Redis
    lease_ms: int = 6000  # how long a dead gateway stays listed (and keeps its roles) before others take over
    auth: bool = False  # require authentication (Kafka SASL, native credentials, admin basic/bearer) and ACLs
    sasl_mechanisms: str = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    super_users: str = ""  # comma-separated user names allowed everything
    admin_token: str = ""  # a bearer token the admin API accepts as a super user: the first user's way in
    acl_cache_seconds: float = 2.0  # how long ACLs read from Redis are trusted before being read again
    tls_cert_file: str = ""  # PEM certificate chain: with it every listener speaks TLS
    tls_key_file: str = ""  # its private key (PEM)
    redis_fsync: str = "everysec"  # embedded Redis's appendfsync: always, everysec or no
    txn_default_timeout_ms: int = 60_000
    txn_max_timeout_ms: int = 900_000
    txn_reaper_interval: float = 1.0
    watermark_snapshot_interval: float = 10.0
    watermark_snapshot_marks: int = 128  # a partition's watermark lookup reads at most about this many markers

    @classmethod
    def from_env(cls, **overrides: Any) -> Config:
        """Defaults, then `GATEWAY_*` variables, then explicit overrides (CLI flags that were given)."""
        base = cls()
        values = {f.name: _env(f.name, getattr(base, f.name)) for f in fields(cls)}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @property
    def kafka_advertised(self) -> tuple[str, int]:
        host = self.advertised_host or ("127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host)
        return host, self.advertised_port or self.kafka_port
