"""UpdateFeatures (KIP-584), and the features ApiVersions v3+ lists (`Admin.describeFeatures` and
`kafka-features describe` read them there): only `transaction.version` is versioned here."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.features import SUPPORTED, FeatureUpdate, FeatureUpdateRefused, UpgradeType
from gateway.domain.security import CLUSTER_NAME, Operation, ResourceType
from gateway.kafka import codec
from gateway.kafka.dispatch import ApiKey, RequestContext, handles
from gateway.kafka.errors import kafka_error


async def api_versions_features(ctx: RequestContext) -> dict[str, Any]:
    """ApiVersions v3+'s feature fields. Below v4 a supported minimum of 0 is sent as 1, as Kafka's
    `ApiVersionsResponse.createSupportedFeatureKeys` does for older clients (KAFKA-17011)."""
    epoch, levels = await ctx.services.features.advertised()
    low = 0 if ctx.api_version >= 4 else 1
    return {
        "supported_features": [{"name": n, "min_version": max(lo, low), "max_version": hi}
                               for n, (lo, hi) in sorted(SUPPORTED.items())],
        "finalized_features_epoch": epoch,
        "finalized_features": [{"name": n, "max_version_level": v, "min_version_level": v}
                               for n, v in sorted(levels.items())],
    }


@handles(ApiKey.UPDATE_FEATURES, 0, 2)
async def update_features(ctx: RequestContext, req: Any) -> Any:
    """All updates or none, as Kafka's controller applies them (QuorumController.updateFeatures): the
    first refused one is the answer, top-level alone; before v2 a success lists every feature asked
    for as done (UpdateFeaturesResponse.createWithErrors, as the suite's Kafka 4.4 answers), and v2
    drops the per-feature results."""
    cls = codec.response_class(ApiKey.UPDATE_FEATURES, ctx.api_version)
    code, message = KafkaError.none, None
    if not await ctx.allowed(ResourceType.CLUSTER, CLUSTER_NAME, Operation.ALTER):
        code = KafkaError.cluster_authorization_failed
    else:
        updates = [FeatureUpdate(u.feature, u.max_version_level, _upgrade_type(ctx.api_version, u))
                   for u in req.feature_updates]
        try:
            await ctx.services.features.update(updates, bool(getattr(req, "validate_only", False)))
        except FeatureUpdateRefused as exc:
            code, message = KafkaError.invalid_update_version, str(exc)
        except Exception as exc:
            code, message = kafka_error(exc), str(exc)
    body: dict[str, Any] = {"throttle_time": 0, "error_code": code, "error_message": message}
    if ctx.api_version < 2:
        body["results"] = [] if code != KafkaError.none else [
            {"feature": u.feature, "error_code": code, "error_message": None} for u in req.feature_updates]
    return codec.build(cls, body)


def _upgrade_type(version: int, update: Any) -> UpgradeType:
    """v0's allow_downgrade is a safe downgrade (UpdateFeaturesRequest.upgradeType)."""
    if version == 0:
        return UpgradeType.SAFE_DOWNGRADE if update.allow_downgrade else UpgradeType.UPGRADE
    try:
        return UpgradeType(update.upgrade_type)
    except ValueError:
        return UpgradeType.UNKNOWN
