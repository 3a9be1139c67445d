"""A SASL Kafka 4.4 broker with StandardAuthorizer and a gateway with authentication on, side by
side with the same SCRAM users (tests/kafka_jvm.py's SASL_USERS, `admin` the super user): where an
application denied by ACLs is compared on both."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from tests.conftest import flush, kafka_bootstrap, running_gateway, test_config
from tests.kafka_jvm import SASL_MECHANISM, SASL_USERS, SaslKafkaBroker


def login(user: str) -> dict[str, str]:
    """A Java client's settings that log it in as `user` with SCRAM over SASL_PLAINTEXT."""
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": SASL_MECHANISM,
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                f'username="{user}" password="{SASL_USERS[user]}";'}


@asynccontextmanager
async def sasl_pair(redis_server: str, tmp_path: Path) -> AsyncIterator[dict[str, str]]:
    """The two bootstraps that ask for a login, by name: {"kafka": ..., "gateway": ...}."""
    flush(redis_server)
    with SaslKafkaBroker(tmp_path / "broker") as broker:
        async with running_gateway(test_config(redis_server, auth=True, super_users="admin")) as gw:
            for user, password in SASL_USERS.items():
                await gw.services.security.set_user(user, password)
            yield {"kafka": broker.sasl_bootstrap, "gateway": kafka_bootstrap(gw)}
