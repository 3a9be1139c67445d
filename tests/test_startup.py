"""`gateway serve` refusing to start, as a user meets it: one line naming the setting to change, a
non-zero exit, no traceback, and nothing left running or locked."""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.config import REDIS_URL_SCHEMES, Config
from gateway.store.connection import connect
from gateway.store.embedded import free_port

SERVE_TIMEOUT = 20.0  # well under the half minute an unreachable Redis used to be waited for


def serve(data_dir: Path, *flags: str) -> tuple[int, list[str]]:
    """Run `gateway serve` to its end; its exit code and its output lines (stdout and stderr)."""
    given = set(flags[::2])
    ports = [item for flag in ("--kafka-port", "--native-port", "--admin-port", "--schema-registry-port")
             if flag not in given
             for item in (flag, "0")]
    args = [sys.executable, "-m", "gateway", "serve", "--data-dir", str(data_dir), *ports, *flags]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    done = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=env, timeout=SERVE_TIMEOUT)
    return done.returncode, done.stdout.splitlines()


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another program listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def assert_released(data_dir: Path) -> None:
    """The embedded Redis stopped (it removes its pid file) and the data dir's lock is free."""
    assert not (data_dir / "redis.pid").exists(), "the embedded redis-server must stop with the gateway"
    fd = os.open(data_dir / "gateway.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError while still held
    finally:
        os.close(fd)


@pytest.mark.parametrize("face", ["kafka", "native", "admin", "schema-registry"])
def test_a_port_in_use_is_one_line_naming_its_flag(tmp_path, taken_port, face):
    data_dir = tmp_path / "data"
    code, lines = serve(data_dir, f"--{face}-port", str(taken_port))
    assert code != 0
    assert lines == [f"gateway: {face.replace('-', ' ')} port {taken_port} is in use: choose another with "
                     f"--{face}-port (GATEWAY_{face.upper().replace('-', '_')}_PORT)"]
    assert_released(data_dir)


def test_an_address_the_host_does_not_have_is_one_line_naming_host(tmp_path):
    code, lines = serve(tmp_path / "data", "--host", "192.0.2.1")  # TEST-NET-1: never this machine's
    assert code != 0
    assert len(lines) == 1 and lines[0].startswith("gateway: cannot listen on 192.0.2.1:")
    assert "--host (GATEWAY_HOST)" in lines[0]
    assert_released(tmp_path / "data")


@pytest.mark.parametrize("scheme", ["redis", "redis+cluster"])
def test_an_unreachable_redis_is_reported_in_seconds_naming_the_url_flag(tmp_path, scheme):
    url = f"{scheme}://127.0.0.1:{free_port()}"  # nothing listens there
    code, lines = serve(tmp_path / "data", "--redis-url", url)  # raises TimeoutExpired after SERVE_TIMEOUT
    assert code != 0
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"gateway: cannot reach Redis at {url}: ")
    assert lines[0].endswith("check --redis-url (GATEWAY_REDIS_URL)")
    assert "Connection refused" in lines[0]


def test_a_redis_url_of_an_unknown_scheme_lists_the_accepted_ones(tmp_path):
    code, lines = serve(tmp_path / "data", "--redis-url", "redis-cluster://127.0.0.1:7000")
    assert code != 0
    assert len(lines) == 1, lines
    assert lines[0].startswith("gateway serve: error: --redis-url (GATEWAY_REDIS_URL) must be ")
    for scheme in ("redis://", "rediss://", "redis+cluster://", "rediss+cluster://", "unix://"):
        assert scheme in lines[0]
    assert "'redis-cluster://127.0.0.1:7000'" in lines[0]


def test_a_certificate_that_does_not_load_is_one_line_naming_the_tls_flags(tmp_path):
    code, lines = serve(tmp_path / "data", "--tls-cert-file", str(tmp_path / "missing.pem"))
    assert code != 0
    assert len(lines) == 1, lines
    assert f"cannot load the TLS certificate {tmp_path / 'missing.pem'}" in lines[0]
    assert "--tls-cert-file (GATEWAY_TLS_CERT_FILE)" in lines[0]
    assert not (tmp_path / "data").exists(), "nothing is started before the certificate loads"


def test_a_data_dir_that_is_a_file_is_one_line_naming_the_flag(tmp_path):
    not_a_dir = tmp_path / "data"
    not_a_dir.write_text("a file")
    code, lines = serve(not_a_dir)
    assert code != 0
    assert lines == [f"gateway: cannot use data dir {not_a_dir}: File exists: give this gateway another --data-dir"]


def test_every_scheme_the_setting_accepts_the_connection_takes():
    for scheme in REDIS_URL_SCHEMES:
        url = f"{scheme}:///tmp/redis.sock" if scheme == "unix" else f"{scheme}://127.0.0.1:{free_port()}"
        url += "/mymaster" if scheme.endswith("+sentinel") else ""  # the primary's name, which Sentinel needs
        Config(redis_url=url)
        connect(url)  # a client is built without connecting; an unknown scheme raises here
