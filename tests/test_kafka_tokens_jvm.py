"""Delegation tokens through Kafka's own code: `kafka-delegation-tokens` (the Java Admin client's
createDelegationToken, describeDelegationToken, renewDelegationToken, expireDelegationToken)
against one gateway, a Java producer logging in with the token (SCRAM with `tokenauth=true`) on
another; and the same raw scenario on the real Kafka 4.4 broker with a token secret, compared."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from gateway.domain.security import Acl, Operation, ResourceType
from tests.conftest import kafka_bootstrap
from tests.kafka_jvm import java, tools
from tests.test_delegation_tokens import pair  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.jvm, pytest.mark.kafka, pytest.mark.slow]


def jaas(user: str, password: str, token: bool = False) -> str:
    extension = ' tokenauth="true"' if token else ""
    return (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" '
            f'password="{password}"{extension};')


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
