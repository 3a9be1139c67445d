"""`gateway serve` as a user runs it: banner, clean Ctrl-C, environment settings, restart after SIGKILL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

from gateway.store.embedded import free_port


def get(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def post(url: str, body: dict):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def test_serve_prints_where_it_listens_and_stops_cleanly(gateway_process):
    gateway_process.start()
    banner = gateway_process.banner
    for port in (gateway_process.kafka_port, gateway_process.native_port, gateway_process.admin_port):
        assert str(port) in banner
    assert "embedded redis-server" in banner
    assert get(gateway_process.admin_url + "/health")["redis"] is True
    assert gateway_process.stop() == 0
    assert not (gateway_process.data_dir / "redis.pid").exists(), "the embedded Redis must stop with the gateway"


def test_restart_after_sigkill_on_the_same_data_dir_keeps_state(gateway_process):
    gateway_process.start()
    post(gateway_process.admin_url + "/admin/v2/topics", {"name": "kept", "partitions": 4})
    gateway_process.kill()
    gateway_process.start()
    described = get(gateway_process.admin_url + "/admin/v2/topics/kept")
    assert len(described["partitions"]) == 4
    assert gateway_process.stop() == 0


def test_flags_fall_back_to_environment_variables(tmp_path):
    admin_port = free_port()
    env = dict(os.environ, GATEWAY_ADMIN_PORT=str(admin_port), GATEWAY_KAFKA_PORT="0", GATEWAY_NATIVE_PORT="0",
               GATEWAY_SCHEMA_REGISTRY_PORT="0",
               GATEWAY_DATA_DIR=str(tmp_path / "d"))
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = next(line for line in proc.stdout if "listening" in line)
        assert f"admin {admin_port}" in line and str(tmp_path / "d") in line
        assert get(f"http://127.0.0.1:{admin_port}/health")["status"] == "ok"
    finally:
        proc.send_signal(2)
        assert proc.wait(30) == 0
