"""Delegation tokens through Kafka's own code: `kafka-delegation-tokens` (the Java Admin client's
createDelegationToken, describeDelegationToken, renewDelegationToken, expireDelegationToken)
against one gateway, a Java producer logging in with the token (SCRAM with `tokenauth=true`) on
another; and the same raw scenario on the real Kafka 4.4 broker with a token secret, compared."""

from __future__ import annotations

import asyncio
import base64
import hmac
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as KafkaError

from gateway.clock import now_ms
from gateway.domain.security import Acl, Operation, ResourceType
from gateway.kafka.dispatch import ApiKey
from tests.conftest import kafka_bootstrap
from tests.kafka_jvm import allowed, java, tools
from tests.kafka_wire import call
from tests.sasl_pair import jaas
from tests.test_delegation_tokens import SECRET, Conn, create, expire, first_fields, ms, pair, renew, scram  # noqa: F401  (pair: the fixture)

pytestmark = [pytest.mark.jvm, pytest.mark.kafka, pytest.mark.slow]


def client_settings(user: str, password: str, token: bool = False) -> list[str]:
    return ["security.protocol=SASL_PLAINTEXT", "sasl.mechanism=SCRAM-SHA-256",
            f"sasl.jaas.config={jaas(user, password, token)}"]


def command_config(tmp_path: Path, user: str) -> str:
    path = tmp_path / f"{user}.properties"
    path.write_text("\n".join(client_settings(user, f"{user}-secret")) + "\n")
    return str(path)


async def test_kafka_delegation_tokens_and_a_java_client_logging_in_with_a_token(pair, tmp_path):  # noqa: F811
    a, b = pair
    await a.services.security.add_acl(Acl("User:alice", ResourceType.TOPIC, "tokens", Operation.ALL))
    alice, bob = command_config(tmp_path, "alice"), command_config(tmp_path, "bob")
    [made] = await tools(["kafka-delegation-tokens", "--bootstrap-server", kafka_bootstrap(a), "--create",
                          "--max-life-time-period", "-1", "--renewer-principal", "User:bob",
                          "--command-config", alice])
    assert made.exit == 0, made.out
    token_id, token_hmac = re.search(r"^(\S{36})\s+(\S+)\s+User:alice\s+User:alice\s+\[User:bob\]", made.out, re.M).groups()
    described, renewed = await tools(
        ["kafka-delegation-tokens", "--bootstrap-server", kafka_bootstrap(b), "--describe", "--owner-principal", "User:alice",
         "--command-config", bob],
        ["kafka-delegation-tokens", "--bootstrap-server", kafka_bootstrap(b), "--renew", "--renew-time-period",
         "60000", "--hmac", token_hmac, "--command-config", bob])
    assert described.exit == 0 and token_id in described.out, described.out
    assert renewed.exit == 0 and "Completed renew operation" in renewed.out, renewed.out
    assert base64.b64decode(token_hmac)  # the tool prints the HMAC in base64, the token's password

    as_token = client_settings(token_id, token_hmac, token=True)
    produced = await java("gateway.jvm.Produce", kafka_bootstrap(b), "tokens", "send:3", *as_token)
    assert len(produced.out.splitlines()) == 3

    [expired] = await tools(["kafka-delegation-tokens", "--bootstrap-server", kafka_bootstrap(a), "--expire",
                             "--expiry-time-period", "-1", "--hmac", token_hmac, "--command-config", alice])
    assert expired.exit == 0 and "Completed expire operation" in expired.out, expired.out
    refused = await java("gateway.jvm.Produce", kafka_bootstrap(b), "tokens", "send:1", "max.block.ms=20000",
                         *as_token, check=False)
    assert refused.returncode != 0 and "SaslAuthenticationException" in refused.out + refused.err


EXPIRED_LOGIN = allowed("A delegation token past its expiry, at SASL login")


async def token_scenario(port: int, kafka_port: int) -> list[object]:
    """What a token's life looks like from outside, timestamps as differences: Kafka's broker sees a
    token the controller made once its metadata arrives, so each step awaits that first."""
    async def login_as(user: str) -> Conn:
        conn, error = await scram(port, user, f"{user}-secret")
        assert error == 0
        return conn

    async def described(conn: Conn, owners: Any = None) -> list[Any]:
        return list((await call(conn, ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"owners": owners})).tokens)

    async def until(conn: Conn, seen: Callable[[set[str]], bool]) -> None:
        while not seen({t.token_id for t in await described(conn)}):
            await asyncio.sleep(0.05)  # the broker's metadata cache catching up with its controller

    alice, bob, admin = await login_as("alice"), await login_as("bob"), await login_as("admin")
    seen: list[object] = [
        (await first_fields(alice, ApiKey.CREATE_DELEGATION_TOKEN, 3, create([("Group", "g")])))[0],
        (await first_fields(alice, ApiKey.CREATE_DELEGATION_TOKEN, 3, create(owner="bob")))[0],
    ]
    made = await call(alice, ApiKey.CREATE_DELEGATION_TOKEN, 3, create([("User", "bob")]))
    issue = ms(made.issue_timestamp)
    seen.append((made.error_code, made.principal_name, made.token_requester_principal_name,
                 ms(made.expiry_timestamp) - issue, ms(made.max_timestamp) - issue,
                 made.hmac == hmac.new(SECRET.encode(), made.token_id.encode(), "sha512").digest()))
    capped = await call(alice, ApiKey.CREATE_DELEGATION_TOKEN, 3, create(max_lifetime=30_000))
    seen.append((ms(capped.max_timestamp) - ms(capped.issue_timestamp),
                 ms(capped.expiry_timestamp) - ms(capped.issue_timestamp)))
    await asyncio.wait_for(until(alice, lambda ids: {made.token_id, capped.token_id} <= ids), 30)
    mine = {made.token_id, capped.token_id}
    seen.append(sorted((t.token_id == made.token_id, t.principal_name, t.token_requester_principal_name,
                        [r.principal_name for r in t.renewers]) for t in await described(bob) if t.token_id in mine))
    seen.append(len(await described(bob, [])))
    seen.append((await first_fields(admin, *renew(made.hmac)))[0])
    seen.append((await first_fields(bob, *renew(b"not an hmac")))[0])
    renewed = await call(bob, *renew(made.hmac, 60_000))
    seen.append((renewed.error_code, ms(renewed.expiry_timestamp) <= ms(made.max_timestamp)))
    as_token, error = await scram(port, made.token_id, base64.b64encode(made.hmac).decode(), token=True)
    seen.append(error)
    seen.append((await first_fields(as_token, ApiKey.CREATE_DELEGATION_TOKEN, 3, create()))[0])
    seen.append((await first_fields(as_token, *renew(made.hmac)))[0])
    before = now_ms()
    code, expiry = await first_fields(alice, *expire(made.hmac, -1))
    seen.append((code, before <= expiry <= now_ms()))
    await asyncio.wait_for(until(alice, lambda ids: made.token_id not in ids), 30)
    seen.append((await first_fields(bob, *renew(made.hmac)))[0])
    short = await call(alice, ApiKey.CREATE_DELEGATION_TOKEN, 3, create(max_lifetime=1))
    await asyncio.wait_for(until(alice, lambda ids: short.token_id in ids), 30)
    while now_ms() <= ms(short.expiry_timestamp):  # the token's last millisecond passes
        await asyncio.sleep(0.001)
    expired_login = (await scram(port, short.token_id, base64.b64encode(short.hmac).decode(), token=True))[1]
    assert expired_login == (KafkaError.none if port == kafka_port else KafkaError.sasl_authentication_failed)
    seen.append(EXPIRED_LOGIN)  # the one step allowed to differ
    seen.append((await first_fields(alice, *renew(short.hmac)))[0])
    return seen


async def test_token_answers_match_kafka(token_kafka_broker, pair):  # noqa: F811
    on_kafka = await token_scenario(token_kafka_broker.sasl_port, token_kafka_broker.sasl_port)
    on_gateway = await token_scenario(pair[0].listeners["kafka"].port, token_kafka_broker.sasl_port)
    assert on_gateway == on_kafka
