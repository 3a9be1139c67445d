"""Users, tokens and ACLs over the admin API, and the credential the admin API itself requires.

With authentication on, every route but /health wants `Authorization: Basic` (user and password)
or `Authorization: Bearer` (a user's token, or the configured admin token), of a principal allowed
admin on the cluster (or a super user): 401 without valid credentials, 403 without that right.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from gateway.admin.body import json_body
from gateway.domain.security import (
    CLUSTER_NAME,
    SCRAM_HASHES,
    Acl,
    Operation,
    ResourceType,
    SecurityService,
    UserInfo,
)
from gateway.errors import AuthenticationFailed, AuthorizationFailed, InvalidRequest

OPEN_PATHS = frozenset({"/health"})


async def principal_of(security: SecurityService, authorization: str) -> str:
    """Who an Authorization header authenticates; AuthenticationFailed when nobody."""
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return await security.check_token(value.strip())
    if scheme.lower() == "basic":
        try:
            user, sep, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise AuthenticationFailed("malformed basic credentials") from None
        if sep:
            return await security.check_password(user, password)
    raise AuthenticationFailed("credentials required: Authorization: Basic (user, password) or Bearer (token)")


def authentication(security: SecurityService) -> Any:
    """The middleware that holds every route but the open ones to an admin's credential."""

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if security.enabled and request.path not in OPEN_PATHS:
            principal = await principal_of(security, request.headers.get("Authorization", ""))
            if not await security.authorize(principal, ResourceType.CLUSTER, CLUSTER_NAME, Operation.ADMIN,
                                            request.remote):
                raise AuthorizationFailed(f"{principal} may not administer this gateway")
        return await handler(request)

    return authenticate


def _user_json(u: UserInfo) -> dict[str, Any]:
    return {"name": u.name, "mechanisms": u.mechanisms, "created_ms": u.created_ms,
            "tokens": [{"id": i, "created_ms": ms} for i, ms in sorted(u.tokens.items())]}


def _not_found(what: str) -> web.Response:
    return web.json_response({"error": "NOT_FOUND", "message": what, "retriable": False}, status=404)


class SecurityApi:
    def __init__(self, security: SecurityService) -> None:
        self.security = security

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/admin/v2/users", self.list_users),
            web.get("/admin/v2/users/{name}", self.get_user),
            web.put("/admin/v2/users/{name}", self.set_user),
            web.delete("/admin/v2/users/{name}", self.delete_user),
            web.post("/admin/v2/users/{name}/tokens", self.create_token),
            web.delete("/admin/v2/users/{name}/tokens/{id}", self.delete_token),
            web.get("/admin/v2/acls", self.list_acls),
            web.post("/admin/v2/acls", self.add_acl),
            web.delete("/admin/v2/acls", self.remove_acl),
        ]

    async def list_users(self, request: web.Request) -> web.Response:
        return web.json_response([_user_json(u) for u in await self.security.users()])

    async def get_user(self, request: web.Request) -> web.Response:
        user = await self.security.user(request.match_info["name"])
        if user is None:
            return _not_found(f"no user {request.match_info['name']!r}")
        return web.json_response(_user_json(user))

    async def set_user(self, request: web.Request) -> web.Response:
        """`{"password": ..., "mechanisms": [...], "iterations": N}`; no password: a token-only user."""
        body = await json_body(request)
        password = body.get("password")
        if password is not None and not isinstance(password, str):
            raise InvalidRequest("'password' is a string")
        mechanisms = body.get("mechanisms") or list(SCRAM_HASHES)
        created = await self.security.set_user(
            request.match_info["name"], password, mechanisms, int(body.get("iterations", 4096))
        )
        user = await self.security.user(request.match_info["name"])
        assert user is not None
        return web.json_response(_user_json(user), status=201 if created else 200)

    async def delete_user(self, request: web.Request) -> web.Response:
        if not await self.security.delete_user(request.match_info["name"]):
            return _not_found(f"no user {request.match_info['name']!r}")
        return web.json_response({"deleted": request.match_info["name"]})

    async def create_token(self, request: web.Request) -> web.Response:
        """A new token for the user, shown this once."""
        token_id, token = await self.security.create_token(request.match_info["name"])
        return web.json_response({"user": request.match_info["name"], "id": token_id, "token": token}, status=201)

    async def delete_token(self, request: web.Request) -> web.Response:
        if not await self.security.delete_token(request.match_info["name"], request.match_info["id"]):
            return _not_found(f"no token {request.match_info['id']!r} of {request.match_info['name']!r}")
        return web.json_response({"deleted": request.match_info["id"]})

    async def list_acls(self, request: web.Request) -> web.Response:
        acls = await self.security.acls(request.query.get("principal"))
        return web.json_response([a.to_json() for a in acls])

    async def add_acl(self, request: web.Request) -> web.Response:
        acl = Acl.parse(await json_body(request))
        added = await self.security.add_acl(acl)
        return web.json_response({**acl.to_json(), "added": added}, status=201 if added else 200)

    async def remove_acl(self, request: web.Request) -> web.Response:
        acl = Acl.parse(await json_body(request))
        if not await self.security.remove_acl(acl):
            return _not_found("no such ACL")
        return web.json_response({**acl.to_json(), "removed": True})
