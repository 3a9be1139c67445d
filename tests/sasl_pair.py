"""A SASL Kafka 4.4 broker with StandardAuthorizer and a gateway with authentication on, side by
side with the same SCRAM users (tests/kafka_jvm.py's SASL_USERS, `admin` the super user), and with
the same delegation token secret when given one: where an application denied by ACLs, or logged
in with a token, is compared on both."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tests.conftest import eventually, flush, kafka_bootstrap, running_gateway, test_config
from tests.kafka_jvm import SASL_MECHANISM, SASL_USERS, SaslKafkaBroker


def jaas(user: str, password: str, token: bool = False) -> str:
    """A Java client's `sasl.jaas.config` for SCRAM; with `token`, KIP-48's `tokenauth` extension,
    which makes `user` a delegation token's id and `password` its HMAC in base64."""
    extension = ' tokenauth="true"' if token else ""
    return (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" '
            f'password="{password}"{extension};')


def login(user: str) -> dict[str, str]:
    """A Java client's settings that log it in as `user` with SCRAM over SASL_PLAINTEXT."""
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": SASL_MECHANISM,
            "sasl.jaas.config": jaas(user, SASL_USERS[user])}


def rdkafka_login(user: str) -> dict[str, str]:
    """The same login in confluent-kafka's (librdkafka's) settings."""
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": SASL_MECHANISM, "sasl.username": user,
            "sasl.password": SASL_USERS[user]}


def token_login(token_id: str, token_hmac: str) -> dict[str, str]:
    """A Java client's settings that log it in with a delegation token (KIP-48)."""
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": SASL_MECHANISM,
            "sasl.jaas.config": jaas(token_id, token_hmac, token=True)}


@asynccontextmanager
async def sasl_pair(redis_server: str, tmp_path: Path, token_secret: str = "",
                    broker: SaslKafkaBroker | None = None) -> AsyncIterator[dict[str, str]]:
    """The two bootstraps that ask for a login, by name: {"kafka": ..., "gateway": ...}; delegation
    tokens on both when `token_secret` is given (off, as on Kafka, without one). On `broker`, one of
    the run's shared ones (the `sasl_kafka_broker` fixture, or `token_kafka_broker`, whose secret the
    gateway takes), with its ACLs deleted first, as the gateway's Redis is flushed; without it, on a
    broker of its own, started and stopped here (a start costs seconds)."""
    flush(redis_server)
    if broker is not None:
        assert not token_secret, "a shared broker's token secret is its own"
        token_secret = broker.settings.get("delegation.token.secret.key", "")
        await _delete_acls(broker.sasl_bootstrap)
        own: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    else:
        broker = own = SaslKafkaBroker(tmp_path / "broker")
        if token_secret:
            broker.settings["delegation.token.secret.key"] = token_secret
    with own:
        async with running_gateway(test_config(redis_server, auth=True, super_users="admin",
                                               delegation_token_secret_key=token_secret)) as gw:
            for user, password in SASL_USERS.items():
                await gw.services.security.set_user(user, password)
            yield {"kafka": broker.sasl_bootstrap, "gateway": kafka_bootstrap(gw)}


EVERY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **rdkafka_login("admin")})


async def acls_listed(bootstrap: str, count: int) -> None:
    """Until the broker at `bootstrap` lists `count` ACLs to its super user: a Kafka broker's
    authorizer learns of created and deleted ACLs from the metadata log a moment after the answer,
    and what a test's client is allowed must be what the test granted. A minute at most: with the
    two cores at load 40, the Streams test's wait once ran past 30 s."""
    admin = _admin(bootstrap)

    def listed() -> bool:
        return len(admin.describe_acls(EVERY_ACL).result(30)) == count

    await eventually(lambda: asyncio.to_thread(listed), 60, f"{count} ACLs listed")


async def _delete_acls(bootstrap: str) -> None:
    """Every ACL of the broker at `bootstrap`, deleted by its super user, until it lists none: an
    earlier test's grant to `alice` (the ACL scenarios' `*`) must not decide the next."""
    admin = _admin(bootstrap)  # alive until the answers: its handle serves them
    for f in admin.delete_acls([EVERY_ACL]).values():
        await asyncio.to_thread(f.result, 30)
    await acls_listed(bootstrap, 0)
