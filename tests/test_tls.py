"""TLS on every listener: the real Kafka clients (SSL and SASL_SSL), the native client, the admin API.

A CA and a server certificate for 127.0.0.1 are made when the tests start; clients trust that CA.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
import urllib.request
from pathlib import Path

import pytest
import trustme

from gateway.client import Client
from gateway.server.gateway import Gateway
from tests.conftest import kafka_bootstrap, native_url, test_config
from tests.kafka_clients import CLIENTS, consume, produce, sasl

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """A CA, a certificate for 127.0.0.1 signed by it, and a second CA nobody should trust."""
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    paths = {"ca": d / "ca.pem", "cert": d / "cert.pem", "key": d / "key.pem", "other_ca": d / "other.pem"}
    ca.cert_pem.write_to_path(paths["ca"])
    cert.private_key_pem.write_to_path(paths["key"])
    for i, blob in enumerate(cert.cert_chain_pems):
        blob.write_to_path(paths["cert"], append=i > 0)
    trustme.CA().cert_pem.write_to_path(paths["other_ca"])
    return paths


async def _started(redis_url: str, pki: dict[str, Path], **overrides: object) -> Gateway:
    gw = Gateway(test_config(redis_url, tls_cert_file=str(pki["cert"]), tls_key_file=str(pki["key"]), **overrides))
    await gw.start()
    return gw


@pytest.fixture
async def tls(redis_url, pki):
    gw = await _started(redis_url, pki)
    yield gw
    await gw.stop()


@pytest.fixture
async def tls_auth(redis_url, pki):
    gw = await _started(redis_url, pki, auth=True, super_users="admin", admin_token="boot")
    await gw.services.security.set_user("admin", "admin-secret")
    yield gw
    await gw.stop()


def ssl_options(client: str, cafile: Path) -> dict[str, object]:
    if client == "confluent":
        return {"security.protocol": "SSL", "ssl.ca.location": str(cafile)}
    if client == "aiokafka":
        return {"security_protocol": "SSL", "ssl_context": ssl.create_default_context(cafile=str(cafile))}
    return {"security_protocol": "SSL", "ssl_cafile": str(cafile)}


def sasl_ssl_options(client: str, cafile: Path) -> dict[str, object]:
    opts = {**ssl_options(client, cafile), **sasl(client, "SCRAM-SHA-512", "admin", "admin-secret", "SASL_SSL")}
    return opts


@pytest.mark.parametrize("client", CLIENTS)
async def test_kafka_clients_over_tls(tls, pki, client):
    bs = kafka_bootstrap(tls)
    opts = ssl_options(client, pki["ca"])
    assert await produce(client, bs, f"tls-{client}", [(b"k", b"encrypted")], **opts) == [(0, 0)]
    got = await consume(client, bs, f"tls-{client}", 0, 0, 1, **opts)
    assert [(r[2], r[3]) for r in got] == [(b"k", b"encrypted")]


@pytest.mark.parametrize("client", CLIENTS)
async def test_kafka_clients_over_sasl_ssl(tls_auth, pki, client):
    bs = kafka_bootstrap(tls_auth)
    opts = sasl_ssl_options(client, pki["ca"])
    assert await produce(client, bs, f"sasl-ssl-{client}", [(None, b"both")], **opts) == [(0, 0)]
    got = await consume(client, bs, f"sasl-ssl-{client}", 0, 0, 1, **opts)
    assert [r[3] for r in got] == [b"both"]


async def test_native_client_over_tls_with_credentials(tls_auth, pki):
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    async with await Client.connect(native_url(tls_auth), username="admin", password="admin-secret",
                                    ssl=context, reconnect=False) as client:
        consumer = await client.subscribe("native-tls", "s", initial_position="earliest")
        producer = await client.create_producer("native-tls")
        await producer.send(b"sealed")
        assert (await consumer.receive(5)).value == b"sealed"


async def test_untrusted_or_plaintext_clients_fail_and_others_are_served(tls, pki):
    untrusted = ssl.create_default_context(cafile=str(pki["other_ca"]))
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        await Client.connect(native_url(tls), ssl=untrusted, reconnect=False, operation_timeout=5)
    with pytest.raises(Exception):  # noqa: B017 - a plaintext client cannot speak to a TLS listener
        await Client.connect(native_url(tls), reconnect=False, operation_timeout=3)
    reader, writer = await asyncio.open_connection("127.0.0.1", tls.listeners["kafka"].port)
    writer.write(b"\x00\x00\x00\x0a" + b"not tls at all")
    assert await asyncio.wait_for(reader.read(), 10) == b""  # the handshake fails, the connection closes
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    async with await Client.connect(native_url(tls), ssl=context, reconnect=False) as client:
        await client.create_producer("still-served")


async def test_admin_api_and_cli_over_https(tls_auth, pki):
    url = f"https://127.0.0.1:{tls_auth.listeners['admin'].port}"
    context = ssl.create_default_context(cafile=str(pki["ca"]))

    def health() -> dict:
        with urllib.request.urlopen(url + "/health", context=context, timeout=10) as r:
            return json.loads(r.read())

    assert (await asyncio.to_thread(health))["status"] == "ok"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "admin", "--admin-url", url, "--cafile", str(pki["ca"]), "--token", "boot",
        "users", "list", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert [u["name"] for u in json.loads(out)] == ["admin"]
