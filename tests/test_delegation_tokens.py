"""Delegation tokens (KIP-48, KIP-373) on the gateway: issued by one gateway, used on another
through Redis; the answers Kafka 4.4's DelegationTokenControlManager and KafkaApis give (their
order: tests/test_kafka_tools_tokens.py compares them with the real broker)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
import struct
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as KafkaError

from gateway.clock import now_ms
from gateway.kafka.dispatch import ApiKey
from gateway.server.gateway import Gateway
from tests.conftest import running_gateway, test_config
from tests.kafka_wire import build_request, call, read_response, request

REDIS_BACKENDS = ("single", "cluster")  # the token scripts touch one slot, {gw:dt}
SECRET = "token-secret-key"
DAY, WEEK = 86_400_000, 604_800_000  # Kafka's defaults: delegation.token.expiry.time.ms, max.lifetime.ms
Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@pytest.fixture
async def pair(redis_url: str) -> AsyncIterator[tuple[Gateway, Gateway]]:
    """Two gateways on one Redis with tokens on; users admin (a super user), alice and bob."""
    async with AsyncExitStack() as stack:
        gws = [await stack.enter_async_context(running_gateway(test_config(
            redis_url, node_id=n, auth=True, super_users="admin", delegation_token_secret_key=SECRET)))
            for n in (0, 1)]
        for user in ("admin", "alice", "bob"):
            await gws[0].services.security.set_user(user, f"{user}-secret")
        yield gws[0], gws[1]


async def scram(port: int, user: str, password: str, *, token: bool = False) -> tuple[Conn, int]:
    """A connection that logged in with SCRAM-SHA-256 as a Java client does (KIP-152), with KIP-48's
    `tokenauth=true` extension for a token; and the last SaslAuthenticate's error code."""
    conn = await asyncio.open_connection("127.0.0.1", port)
    assert (await call(conn, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})).error_code == 0
    first_bare = f"n={user},r={secrets.token_urlsafe(18)}" + (",tokenauth=true" if token else "")
    first = await call(conn, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": f"n,,{first_bare}".encode()})
    if first.error_code:
        return conn, first.error_code
    server_first = first.auth_bytes.decode()
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
    final = await call(conn, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": f"{without_proof},p={proof}".encode()})
    return conn, final.error_code


async def login(gw: Gateway, user: str) -> Conn:
    conn, error = await scram(gw.listeners["kafka"].port, user, f"{user}-secret")
    assert error == 0
    return conn


async def first_fields(conn: Conn, api_key: int, version: int, body: dict[str, Any]) -> tuple[int, int]:
    """(error code, the 64-bit field after it): read raw, as kio refuses the -1 timestamps of a refusal."""
    conn[1].write(request(build_request(api_key, version, body), 7))
    code, value = struct.unpack_from(">hq", await read_response(conn[0]), 5)
    return code, value


def create(renewers: list[tuple[str, str]] = (), max_lifetime: int = -1, owner: str | None = None) -> dict[str, Any]:
    return {"owner_principal_type": "User", "owner_principal_name": owner, "max_lifetime": max_lifetime,
            "renewers": [{"principal_type": t, "principal_name": n} for t, n in renewers]}


def renew(token_hmac: bytes, period: int = -1) -> tuple[int, int, dict[str, Any]]:
    return ApiKey.RENEW_DELEGATION_TOKEN, 2, {"hmac": token_hmac, "renew_period": period}


def expire(token_hmac: bytes, period: int = -1) -> tuple[int, int, dict[str, Any]]:
    return ApiKey.EXPIRE_DELEGATION_TOKEN, 2, {"hmac": token_hmac, "expiry_time_period": period}


def ms(timestamp: Any) -> int:
    return round(timestamp.timestamp() * 1000)


async def test_a_token_issued_on_one_gateway_is_renewed_described_and_used_on_another(pair):
    a, b = pair
    alice = await login(a, "alice")
    made = await call(alice, ApiKey.CREATE_DELEGATION_TOKEN, 3, create([("User", "bob")]))
    assert made.error_code == KafkaError.none
    assert (made.principal_name, made.token_requester_principal_name) == ("alice", "alice")
    issue = ms(made.issue_timestamp)
    assert (ms(made.expiry_timestamp) - issue, ms(made.max_timestamp) - issue) == (DAY, WEEK)
    assert made.hmac == hmac.new(SECRET.encode(), made.token_id.encode(), "sha512").digest()  # Kafka's HMAC

    described = await call(await login(b, "bob"), ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"owners": None})
    assert described.error_code == KafkaError.none
    [token] = described.tokens
    assert (token.token_id, token.hmac, token.principal_name) == (made.token_id, made.hmac, "alice")
    assert [(r.principal_type, r.principal_name) for r in token.renewers] == [("User", "bob")]
    assert (await call(await login(b, "admin"), ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"owners": []})).tokens == ()

    bob = await login(b, "bob")
    renewed = await call(bob, *renew(made.hmac, 60_000))
    assert renewed.error_code == KafkaError.none and ms(renewed.expiry_timestamp) < issue + DAY
    assert (await first_fields(await login(b, "admin"), *renew(made.hmac)))[0] == \
        KafkaError.delegation_token_owner_mismatch  # a super user is neither its owner nor a renewer
    assert (await first_fields(bob, *renew(b"not an hmac")))[0] == KafkaError.delegation_token_not_found

    # the token logs in on the other gateway as its owner, and may not make or renew tokens
    as_token, error = await scram(b.listeners["kafka"].port, made.token_id, base64.b64encode(made.hmac).decode(),
                                  token=True)
    assert error == 0
    assert (await first_fields(as_token, ApiKey.CREATE_DELEGATION_TOKEN, 3, create()))[0] == \
        KafkaError.delegation_token_request_not_allowed
    assert (await first_fields(as_token, *renew(made.hmac)))[0] == KafkaError.delegation_token_request_not_allowed
    _, wrong = await scram(b.listeners["kafka"].port, made.token_id, "d3Jvbmc=", token=True)
    assert wrong == KafkaError.sasl_authentication_failed
    _, as_user = await scram(b.listeners["kafka"].port, made.token_id, base64.b64encode(made.hmac).decode())
    assert as_user == KafkaError.sasl_authentication_failed  # without tokenauth the id is a user name

    # expiring it at once removes it; the answer's expiry is now, as Kafka 4.4's
    before = now_ms()
    code, expiry = await first_fields(alice, *expire(made.hmac, -1))
    assert code == KafkaError.none and before <= expiry <= now_ms()
    assert (await first_fields(bob, *renew(made.hmac)))[0] == KafkaError.delegation_token_not_found
    assert (await call(alice, ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"owners": None})).tokens == ()


async def test_lifetimes_renewers_and_expiry(pair):
    a, b = pair
    alice = await login(a, "alice")
    bad = await first_fields(alice, ApiKey.CREATE_DELEGATION_TOKEN, 3, create([("Group", "g")]))
    assert bad[0] == KafkaError.invalid_principal_type
    capped = await call(alice, ApiKey.CREATE_DELEGATION_TOKEN, 3, create(max_lifetime=30_000))
    assert ms(capped.max_timestamp) - ms(capped.issue_timestamp) == 30_000 == \
        ms(capped.expiry_timestamp) - ms(capped.issue_timestamp)  # max lifetime caps the expiry too
    renewed = await call(alice, *renew(capped.hmac, DAY))
    assert ms(renewed.expiry_timestamp) == ms(capped.max_timestamp)  # no renewal passes the max

    short = await call(alice, ApiKey.CREATE_DELEGATION_TOKEN, 3, create(max_lifetime=1))
    while now_ms() <= ms(short.expiry_timestamp):  # the token's last millisecond passes
        await asyncio.sleep(0.001)
    _, error = await scram(b.listeners["kafka"].port, short.token_id, base64.b64encode(short.hmac).decode(), token=True)
    assert error == KafkaError.sasl_authentication_failed
    assert (await first_fields(alice, *renew(short.hmac)))[0] == KafkaError.delegation_token_expired
    assert (await first_fields(alice, *expire(short.hmac)))[0] == KafkaError.delegation_token_expired
