"""ApiVersions: what this gateway implements, computed from the handler registry."""

from __future__ import annotations

import re
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.kafka import codec
from gateway.kafka.dispatch import ApiKey, RequestContext, handles, supported
from gateway.kafka.features import api_versions_features


def _api_keys() -> list[dict[str, int]]:
    return [{"api_key": r.api_key, "min_version": r.min_version, "max_version": r.max_version} for r in supported()]


CLIENT_SOFTWARE = "client_software"
"""`ConnectionState.extra` key: the (name, version) a client's ApiVersions v3+ gave."""
# what Kafka's ApiVersionsRequest.isValid asks of a v3+ client's software name and version
SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


@handles(ApiKey.API_VERSIONS, 0, 4)
async def api_versions(ctx: RequestContext, req: Any) -> Any:
    """A v3+ request whose client software name or version is not of Kafka's pattern gets
    INVALID_REQUEST and no list, as Kafka's `KafkaApis.handleApiVersionsRequest` answers it."""
    cls = codec.response_class(ApiKey.API_VERSIONS, ctx.api_version)
    if ctx.api_version >= 3 and not all(
            SOFTWARE_NAME_VERSION.fullmatch(str(v)) for v in (req.client_software_name, req.client_software_version)):
        return codec.build(cls, {"error_code": KafkaError.invalid_request, "api_keys": [], "throttle_time": 0})
    if ctx.api_version >= 3:  # KIP-714's match selectors and telemetry labels name the client's software
        ctx.connection.extra[CLIENT_SOFTWARE] = (str(req.client_software_name), str(req.client_software_version))
    features = await api_versions_features(ctx) if ctx.api_version >= 3 else {}
    return codec.build(cls, {"error_code": KafkaError.none, "api_keys": _api_keys(), "throttle_time": 0, **features})


def unsupported_version_body() -> list[bytes | memoryview]:
    """ApiVersions v0 with UNSUPPORTED_VERSION and our list: what Kafka sends a client newer than it."""
    cls = codec.response_class(ApiKey.API_VERSIONS, 0)
    return [codec.encode_body(codec.build(cls, {"error_code": KafkaError.unsupported_version, "api_keys": _api_keys()}))]
