"""DescribeUserScramCredentials and AlterUserScramCredentials over the gateway's users: the same
users the admin API manages and SASL authenticates.

As Kafka's ScramControlManager: a client sends the salt, the iteration count and the salted
password (never the password), and the gateway keeps StoredKey and ServerKey; each user is
altered at most once per request (DUPLICATE_RESOURCE for all of that user's alterations), deleting
a credential the user lacks is RESOURCE_NOT_FOUND, an unknown mechanism UNSUPPORTED_SASL_MECHANISM,
iterations outside 4096..16384 UNACCEPTABLE_CREDENTIAL. Describing wants describe on the cluster,
altering alter on it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.security import CLUSTER_NAME, MIN_ITERATIONS, Operation, ResourceType, ScramCredential
from gateway.kafka import codec
from gateway.kafka.dispatch import ApiKey, RequestContext, handles
from gateway.kafka.errors import error_message, kafka_error

MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
_MECHANISMS = {code: name for name, code in MECHANISM_CODES.items()}
MAX_ITERATIONS = 16384  # Kafka's ScramControlManager.MAX_ITERATIONS


def _response(ctx: RequestContext, values: dict[str, Any]) -> Any:
    cls = codec.response_class(ctx.api_key, ctx.api_version)
    assert cls is not None
    return codec.build(cls, {"throttle_time": 0, **values})


def _result(user: str, code: KafkaError = KafkaError.none, message: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message, **extra}


@handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
async def describe_user_scram_credentials(ctx: RequestContext, req: Any) -> Any:
    security = ctx.services.security
    if not await ctx.allowed(ResourceType.CLUSTER, CLUSTER_NAME, Operation.DESCRIBE):
        return _response(ctx, {"error_code": KafkaError.cluster_authorization_failed,
                               "error_message": "not authorized on the cluster", "results": []})
    try:
        everyone = not req.users
        names = [u.name for u in req.users or ()] if not everyone else [u.name for u in await security.users()]
        counts = Counter(names)
        results = []
        for name in dict.fromkeys(names):
            if counts[name] > 1:
                results.append(_result(name, KafkaError.duplicate_resource,
                                       f"Cannot describe SCRAM credentials for the same user twice in a single "
                                       f"request: {name}"))
                continue
            found = await security.credentials(name)
            if found:
                results.append(_result(name, credential_infos=[
                    {"mechanism": MECHANISM_CODES[m], "iterations": i} for m, i in found.items()]))
            elif not everyone:  # listing everyone leaves out the users without credentials (token-only)
                results.append(_result(name, KafkaError.resource_not_found,
                                       f"Attempt to describe a user credential that does not exist: {name}"))
    except Exception as exc:
        return _response(ctx, {"error_code": kafka_error(exc), "error_message": error_message(exc), "results": []})
    return _response(ctx, {"error_code": KafkaError.none, "error_message": None, "results": results})


def _refusal(name: str, mechanism: int, iterations: int | None = None) -> tuple[KafkaError, str] | None:
    if not name:
        return KafkaError.unacceptable_credential, "Username must not be empty"
    if mechanism not in _MECHANISMS:
        return KafkaError.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    if iterations is not None and iterations < MIN_ITERATIONS:
        return KafkaError.unacceptable_credential, "Too few iterations"
    if iterations is not None and iterations > MAX_ITERATIONS:
        return KafkaError.unacceptable_credential, "Too many iterations"
    return None


@handles(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def alter_user_scram_credentials(ctx: RequestContext, req: Any) -> Any:
    security = ctx.services.security
    names = [d.name for d in req.deletions] + [u.name for u in req.upsertions]
    if not await ctx.allowed(ResourceType.CLUSTER, CLUSTER_NAME, Operation.ALTER):
        return _response(ctx, {"results": [
            _result(n, KafkaError.cluster_authorization_failed, "not authorized on the cluster")
            for n in dict.fromkeys(names)]})
    counts = Counter(names)
    refused: dict[str, tuple[KafkaError, str]] = {}
    results = []
    for d in req.deletions:
        why = _refusal(d.name, d.mechanism)
        if counts[d.name] > 1 or why is not None:
            refused.setdefault(d.name, why or (KafkaError.duplicate_resource, _TWICE))
            continue
        try:
            if await security.delete_credential(d.name, _MECHANISMS[d.mechanism]):
                results.append(_result(d.name))
            else:
                refused[d.name] = (KafkaError.resource_not_found,
                                   "Attempt to delete a user credential that does not exist")
        except Exception as exc:
            refused[d.name] = (kafka_error(exc), error_message(exc) or "")
    for u in req.upsertions:
        why = _refusal(u.name, u.mechanism, u.iterations)
        if counts[u.name] > 1 or why is not None:
            refused.setdefault(u.name, why or (KafkaError.duplicate_resource, _TWICE))
            continue
        mechanism = _MECHANISMS[u.mechanism]
        try:
            credential = ScramCredential.from_salted(mechanism, u.salt, u.salted_password, u.iterations)
            await security.set_credential(u.name, mechanism, credential)
            results.append(_result(u.name))
        except Exception as exc:
            refused[u.name] = (kafka_error(exc), error_message(exc) or "")
    results += [_result(name, code, message) for name, (code, message) in refused.items()]
    return _response(ctx, {"results": results})


_TWICE = "A user credential cannot be altered twice in the same request"
