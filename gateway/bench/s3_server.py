"""s3s-fs, a real S3-compatible server (Rust's s3s crate over a directory, Apache-2.0, from crates.io),
as `./dev` builds it into tests/s3server: the S3 backend of `gateway bench --tier` and of the suite's
object-store tests, one launcher for both. It listens on a free loopback port with its own
credentials, its bucket a directory under `root`; `kill`, `pause` and `start` again let a test take
the store away and bring it back on the same port and data."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from gateway.store.embedded import free_port

BINARY = Path(__file__).resolve().parents[2] / "tests" / "s3server" / "s3s-fs"  # where ./dev builds it
START_TIMEOUT = 30.0


@dataclass
class S3Server:
    """One s3s-fs process serving `root`, with one bucket made in it."""

    root: Path
    bucket: str = "tier"
    port: int = field(default_factory=free_port)
    access_key: str = field(default_factory=lambda: "gw" + secrets.token_hex(8))
    secret_key: str = field(default_factory=lambda: secrets.token_hex(20))
    proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """The AWS_* variables a client of this server needs."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": "us-east-1"}

    def start(self) -> Self:
        """Start the server and return once it accepts connections; a clear error if it was never built."""
        if not BINARY.is_file():
            raise RuntimeError(f"{BINARY} is missing: ./dev test (or ./dev gateway bench --tier) builds it")
        (self.root / self.bucket).mkdir(parents=True, exist_ok=True)
        log = open(self.root.parent / f"s3s-fs-{self.port}.log", "ab")
        with log:
            self.proc = subprocess.Popen(
                [str(BINARY), "--host", "127.0.0.1", "--port", str(self.port), "--access-key", self.access_key,
                 "--secret-key", self.secret_key, str(self.root)],
                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "warn"})
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"s3s-fs exited with code {self.proc.returncode}; its log is {log.name}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"s3s-fs did not listen on port {self.port} within {START_TIMEOUT}s") from None
                time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL: the store gone at once, connections refused."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP: the store there but never answering (the kernel still accepts connections)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        self.kill()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
