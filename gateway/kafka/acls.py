"""CreateAcls, DescribeAcls and DeleteAcls over the gateway's ACLs: the same set the admin API
edits, so a change made either way is in force for both at once.

As Kafka's AclApis and AclControlManager: the three need alter (create, delete) or describe on
the cluster; a creation must name a concrete resource type, literal or prefixed, an operation
and allow or deny (INVALID_REQUEST otherwise, per creation); filters may say "any" anywhere and
"match" for the pattern (`gateway.domain.security.AclFilter`); all of one request's deletions
happen in one step. ACLs are managed with authentication off too, so they can be in place before
it is turned on. Versions 1-3 (Kafka 4 dropped v0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.security import (
    CLUSTER_NAME,
    Acl,
    AclFilter,
    Operation,
    PatternType,
    ResourceType,
)
from gateway.errors import InvalidRequest
from gateway.kafka import codec
from gateway.kafka.authz import ANY_CODE, OPERATION_CODES, PATTERN_CODES, PERMISSION_CODES, RESOURCE_CODES
from gateway.kafka.dispatch import ApiKey, RequestContext, handles
from gateway.kafka.errors import MalformedRequest, error_message, kafka_error

T = TypeVar("T")

_RESOURCES = {code: r for r, code in RESOURCE_CODES.items()}
_OPERATIONS = {code: op for op, code in OPERATION_CODES.items()}
_PATTERNS = {code: p for p, code in PATTERN_CODES.items()}
_PERMISSIONS = {code: p for p, code in PERMISSION_CODES.items()}
_NOT_AUTHORIZED = "not authorized on the cluster"


def _response(ctx: RequestContext, values: dict[str, Any]) -> Any:
    cls = codec.response_class(ctx.api_key, ctx.api_version)
    assert cls is not None
    return codec.build(cls, {"throttle_time": 0, **values})


def _decode(codes: Mapping[int, T], code: int, what: str, *, any_ok: bool = False) -> T | None:
    """The value of a Kafka enum code; None for "any" where that may be; InvalidRequest otherwise."""
    if any_ok and code == ANY_CODE:
        return None
    if code not in codes:
        raise InvalidRequest(f"invalid {what} {code}")
    return codes[code]


def _refuse_unknown(entries: Any, fields: tuple[str, str, str, str]) -> None:
    """Kafka's CreateAcls, DescribeAcls and DeleteAcls requests refuse an UNKNOWN element (code 0)
    while they are read (`validate()` throws IllegalArgumentException), so the broker closes the
    connection: MalformedRequest does the same here."""
    for entry in entries:
        for name in fields:
            if getattr(entry, name) == 0:
                raise MalformedRequest(f"ACL element {name} is UNKNOWN")


_KNOWN: tuple[Mapping[int, object], ...] = (_RESOURCES, _PATTERNS, _OPERATIONS, _PERMISSIONS)


def _matches_nothing(f: Any) -> bool:
    """A filter with a code its enum lacks (other than 0): Kafka reads it as UNKNOWN, which no
    binding matches, and answers without error."""
    return any(getattr(f, name) not in codes and getattr(f, name) != ANY_CODE
               for name, codes in zip(_FILTER_FIELDS, _KNOWN, strict=True))


_CREATION_FIELDS = ("resource_type", "resource_pattern_type", "operation", "permission_type")
_FILTER_FIELDS = ("resource_type_filter", "pattern_type_filter", "operation", "permission_type")


def _any_in_creation(c: Any) -> bool:
    """A creation with ANY (or the MATCH pattern) somewhere: Kafka cannot build its binding and
    answers UNKNOWN_SERVER_ERROR for the request (ResourcePattern and AccessControlEntry refuse ANY)."""
    return ANY_CODE in (c.resource_type, c.operation, c.permission_type) or c.resource_pattern_type in (
        PATTERN_CODES["any"], PATTERN_CODES["match"])


def _creation(c: Any) -> Acl:
    pattern = _decode(_PATTERNS, c.resource_pattern_type, "pattern type")
    if pattern not in ("literal", "prefixed"):
        raise InvalidRequest(f"invalid pattern type {c.resource_pattern_type}: an ACL is literal or prefixed")
    resource = _decode(_RESOURCES, c.resource_type, "resource type")
    operation = _decode(_OPERATIONS, c.operation, "operation")
    permission = _decode(_PERMISSIONS, c.permission_type, "permission type")
    assert resource is not None and operation is not None and permission is not None
    acl = Acl(c.principal, resource, c.resource_name, operation, PatternType(pattern), c.host, permission)
    acl.validate()
    return acl


def _filter(f: Any, name: str | None) -> AclFilter:
    """A DescribeAcls request or a DeleteAcls filter (their fields are named alike)."""
    pattern = _decode(_PATTERNS, f.pattern_type_filter, "pattern type")
    assert pattern is not None
    return AclFilter(
        _decode(_RESOURCES, f.resource_type_filter, "resource type", any_ok=True),
        name,
        pattern,
        f.principal_filter,
        f.host_filter,
        _decode(_OPERATIONS, f.operation, "operation", any_ok=True),
        _decode(_PERMISSIONS, f.permission_type, "permission type", any_ok=True),
    )


def _binding(acl: Acl) -> dict[str, Any]:
    return {"resource_type": RESOURCE_CODES[acl.resource_type], "resource_name": acl.resource_name,
            "pattern_type": PATTERN_CODES[acl.pattern.value], "principal": acl.principal, "host": acl.host,
            "operation": OPERATION_CODES[acl.operation], "permission_type": PERMISSION_CODES[acl.permission]}


async def _cluster(ctx: RequestContext, operation: Operation) -> bool:
    return await ctx.allowed(ResourceType.CLUSTER, CLUSTER_NAME, operation)


@handles(ApiKey.CREATE_ACLS, 1, 3)
async def create_acls(ctx: RequestContext, req: Any) -> Any:
    if not await _cluster(ctx, Operation.ALTER):
        return _response(ctx, {"results": [
            {"error_code": KafkaError.cluster_authorization_failed, "error_message": _NOT_AUTHORIZED}
            for _ in req.creations]})
    _refuse_unknown(req.creations, _CREATION_FIELDS)
    if any(_any_in_creation(c) for c in req.creations):
        # Kafka's ControllerApis.handleCreateAcls builds every creation's AclBinding before creating
        # any: one that cannot be built fails them all (compared in test_kafka_differential_acls)
        return _response(ctx, {"results": [
            {"error_code": KafkaError.unknown_server_error,
             "error_message": "an ACL binding may not contain ANY or MATCH"} for _ in req.creations]})
    results: list[dict[str, Any]] = []
    valid: list[tuple[int, Acl]] = []
    for i, c in enumerate(req.creations):
        try:
            valid.append((i, _creation(c)))
            results.append({"error_code": KafkaError.none, "error_message": None})
        except InvalidRequest as exc:
            results.append({"error_code": KafkaError.invalid_request, "error_message": str(exc)})
    try:
        await ctx.services.security.create_acls([acl for _, acl in valid])
    except Exception as exc:
        for i, _ in valid:
            results[i] = {"error_code": kafka_error(exc), "error_message": error_message(exc)}
    return _response(ctx, {"results": results})


@handles(ApiKey.DESCRIBE_ACLS, 1, 3)
async def describe_acls(ctx: RequestContext, req: Any) -> Any:
    if not await _cluster(ctx, Operation.DESCRIBE):
        return _response(ctx, {"error_code": KafkaError.cluster_authorization_failed,
                               "error_message": _NOT_AUTHORIZED, "resources": []})
    _refuse_unknown([req], _FILTER_FIELDS)
    if _matches_nothing(req):
        return _response(ctx, {"error_code": KafkaError.none, "error_message": None, "resources": []})
    try:
        found = await ctx.services.security.acls(acl_filter=_filter(req, req.resource_name_filter))
    except Exception as exc:
        code = KafkaError.invalid_request if isinstance(exc, InvalidRequest) else kafka_error(exc)
        return _response(ctx, {"error_code": code, "error_message": error_message(exc), "resources": []})
    resources: dict[tuple[ResourceType, str, PatternType], list[dict[str, Any]]] = {}
    for acl in found:
        b = _binding(acl)
        resources.setdefault((acl.resource_type, acl.resource_name, acl.pattern), []).append(
            {k: b[k] for k in ("principal", "host", "operation", "permission_type")})
    return _response(ctx, {"error_code": KafkaError.none, "error_message": None, "resources": [
        {"resource_type": RESOURCE_CODES[t], "resource_name": n, "pattern_type": PATTERN_CODES[p.value], "acls": acls}
        for (t, n, p), acls in resources.items()]})


@handles(ApiKey.DELETE_ACLS, 1, 3)
async def delete_acls(ctx: RequestContext, req: Any) -> Any:
    if not await _cluster(ctx, Operation.ALTER):
        return _response(ctx, {"filter_results": [
            {"error_code": KafkaError.cluster_authorization_failed, "error_message": _NOT_AUTHORIZED,
             "matching_acls": []} for _ in req.filters]})
    _refuse_unknown(req.filters, _FILTER_FIELDS)
    results: list[dict[str, Any]] = []
    valid: list[tuple[int, AclFilter]] = []
    for i, f in enumerate(req.filters):
        if _matches_nothing(f):
            results.append({"error_code": KafkaError.none, "error_message": None, "matching_acls": []})
            continue
        try:
            valid.append((i, _filter(f, f.resource_name_filter)))
            results.append({"error_code": KafkaError.none, "error_message": None, "matching_acls": []})
        except InvalidRequest as exc:
            results.append({"error_code": KafkaError.invalid_request, "error_message": str(exc), "matching_acls": []})
    try:
        deleted = await ctx.services.security.delete_acls([f for _, f in valid])
    except Exception as exc:
        for i, _ in valid:
            results[i] = {"error_code": kafka_error(exc), "error_message": error_message(exc), "matching_acls": []}
    else:
        for (i, _), acls in zip(valid, deleted, strict=True):
            results[i]["matching_acls"] = [
                {"error_code": KafkaError.none, "error_message": None, **_binding(a)} for a in acls]
    return _response(ctx, {"filter_results": results})
