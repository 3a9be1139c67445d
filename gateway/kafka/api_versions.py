"""ApiVersions: what this gateway implements, computed from the handler registry."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.kafka import codec
from gateway.kafka.dispatch import ApiKey, RequestContext, handles, supported


def _api_keys() -> list[dict[str, int]]:
    return [{"api_key": r.api_key, "min_version": r.min_version, "max_version": r.max_version} for r in supported()]


@handles(ApiKey.API_VERSIONS, 0, 4)
async def api_versions(ctx: RequestContext, req: Any) -> Any:
    cls = codec.response_class(ApiKey.API_VERSIONS, ctx.api_version)
    return codec.build(cls, {"error_code": KafkaError.none, "api_keys": _api_keys(), "throttle_time": 0})


def unsupported_version_body() -> list[bytes | memoryview]:
    """ApiVersions v0 with UNSUPPORTED_VERSION and our list: what Kafka sends a client newer than it."""
    cls = codec.response_class(ApiKey.API_VERSIONS, 0)
    return [codec.encode_body(codec.build(cls, {"error_code": KafkaError.unsupported_version, "api_keys": _api_keys()}))]
