"""Users, tokens and ACLs in Redis and the authorizer's decisions, on a single Redis and a cluster."""

from __future__ import annotations

import pytest

from gateway.domain.security import Acl, Operation, PatternType, ResourceType, SecurityService
from gateway.errors import AuthenticationFailed, InvalidRequest
from gateway.store import Store

REDIS_BACKENDS = ("single", "cluster")


@pytest.fixture
async def security(redis_url):
    store = Store.open(redis_url)
    yield SecurityService(store, enabled=True, super_users=["root"], admin_token="boot")
    await store.close()


async def test_users_passwords_and_tokens(security):
    assert await security.set_user("alice", "first") is True
    assert await security.check_password("alice", "first") == "User:alice"
    assert await security.set_user("alice", "second", ["SCRAM-SHA-512"]) is False  # replaced
    with pytest.raises(AuthenticationFailed):
        await security.check_password("alice", "first")
    assert await security.check_password("alice", "second") == "User:alice"
    token_id, token = await security.create_token("alice")
    assert await security.check_token(token) == "User:alice"
    assert await security.check_token("boot") == "User:admin-token"
    [info] = await security.users()
    assert (info.name, info.mechanisms, list(info.tokens)) == ("alice", ["SCRAM-SHA-512"], [token_id])
    assert await security.delete_token("alice", token_id) is True
    with pytest.raises(AuthenticationFailed):
        await security.check_token(token)
    await security.create_token("alice")
    assert await security.delete_user("alice") is True
    assert await security.users() == [] and await security.store.token_owner("anything") is None
    with pytest.raises(AuthenticationFailed):
        await security.check_password("alice", "second")
    with pytest.raises(InvalidRequest):
        await security.create_token("alice")  # no such user
    with pytest.raises(InvalidRequest):
        await security.set_user("", "x")


async def test_token_only_users_have_no_password(security):
    await security.set_user("robot", None)
    _, token = await security.create_token("robot")
    assert await security.check_token(token) == "User:robot"
    with pytest.raises(AuthenticationFailed):
        await security.check_password("robot", "")


async def test_acl_decisions(security):
    def acl(principal: str, kind: ResourceType, name: str, op: Operation, pattern=PatternType.LITERAL) -> Acl:
        return Acl(principal, kind, name, op, pattern)

    await security.add_acl(acl("User:alice", ResourceType.TOPIC, "orders", Operation.WRITE))
    await security.add_acl(acl("User:alice", ResourceType.TOPIC, "logs-", Operation.READ, PatternType.PREFIXED))
    await security.add_acl(acl("User:*", ResourceType.GROUP, "*", Operation.READ))
    assert await security.add_acl(acl("User:alice", ResourceType.TOPIC, "orders", Operation.WRITE)) is False

    async def may(principal: str, kind: ResourceType, name: str, op: Operation) -> bool:
        return await security.authorize(principal, kind, name, op)

    assert await may("User:alice", ResourceType.TOPIC, "orders", Operation.WRITE)
    assert await may("User:alice", ResourceType.TOPIC, "orders", Operation.DESCRIBE)  # implied by write
    assert not await may("User:alice", ResourceType.TOPIC, "orders", Operation.READ)
    assert not await may("User:alice", ResourceType.TOPIC, "orders2", Operation.WRITE)  # literal, not prefix
    assert await may("User:alice", ResourceType.TOPIC, "logs-app", Operation.READ)
    assert not await may("User:alice", ResourceType.TOPIC, "log", Operation.READ)
    assert await may("User:bob", ResourceType.GROUP, "anything", Operation.READ)  # User:* and name *
    assert not await may("User:bob", ResourceType.GROUP, "anything", Operation.ADMIN)
    assert await may("User:root", ResourceType.CLUSTER, "kafka-cluster", Operation.ADMIN)  # a super user
    assert not await may(None, ResourceType.GROUP, "anything", Operation.READ)
    assert [a.resource_name for a in await security.acls("User:alice")] == ["logs-", "orders"]
    assert await security.remove_acl(acl("User:alice", ResourceType.TOPIC, "orders", Operation.WRITE)) is True
    assert not await may("User:alice", ResourceType.TOPIC, "orders", Operation.WRITE)


async def test_with_authentication_off_everything_is_allowed(redis_url):
    store = Store.open(redis_url)
    try:
        open_service = SecurityService(store)
        assert await open_service.authorize(None, ResourceType.CLUSTER, "kafka-cluster", Operation.ADMIN)
    finally:
        await store.close()
