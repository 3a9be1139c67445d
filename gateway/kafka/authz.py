"""Authorization rules that several Kafka APIs share; the rest are one `ctx.allowed` call in place.

Also Kafka's numbering of ACL resource types, operations, pattern types and permissions (the
`org.apache.kafka.common.acl` and `...resource` enums), and KIP-430's authorized operations: a
bitfield with bit `1 << code` set for each operation allowed, INT32_MIN when not asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.domain.security import CLUSTER_NAME, Operation, Permission, ResourceType
from gateway.kafka.dispatch import RequestContext

NOT_REQUESTED = -(2**31)

RESOURCE_CODES = {ResourceType.TOPIC: 2, ResourceType.GROUP: 3, ResourceType.CLUSTER: 4,
                  ResourceType.TRANSACTIONAL_ID: 5, ResourceType.DELEGATION_TOKEN: 6, ResourceType.USER: 7}
OPERATION_CODES = {
    Operation.ALL: 2, Operation.READ: 3, Operation.WRITE: 4, Operation.CREATE: 5, Operation.DELETE: 6,
    Operation.ALTER: 7, Operation.DESCRIBE: 8, Operation.CLUSTER_ACTION: 9, Operation.DESCRIBE_CONFIGS: 10,
    Operation.ALTER_CONFIGS: 11, Operation.IDEMPOTENT_WRITE: 12, Operation.CREATE_TOKENS: 13,
    Operation.DESCRIBE_TOKENS: 14, Operation.TWO_PHASE_COMMIT: 15,
}
PATTERN_CODES = {"any": 1, "match": 2, "literal": 3, "prefixed": 4}
PERMISSION_CODES = {Permission.DENY: 2, Permission.ALLOW: 3}
ANY_CODE = 1  # "any" in every one of these enums; 0 is "unknown"


async def may_create_topic(ctx: RequestContext, name: str) -> bool:
    """Create on the cluster or on the topic, for CreateTopics and Metadata's creation on first use
    alike (KafkaApis.handleTopicMetadataRequest: WRITE alone creates nothing)."""
    return (
        await ctx.allowed(ResourceType.CLUSTER, CLUSTER_NAME, Operation.CREATE)
        or await ctx.allowed(ResourceType.TOPIC, name, Operation.CREATE)
    )


async def may_describe_cluster(ctx: RequestContext) -> bool:
    return await ctx.allowed(ResourceType.CLUSTER, CLUSTER_NAME, Operation.DESCRIBE)


async def may_alter_cluster(ctx: RequestContext) -> bool:
    return await ctx.allowed(ResourceType.CLUSTER, CLUSTER_NAME, Operation.ALTER)


async def authorized_operations(ctx: RequestContext, resource: ResourceType, name: str, requested: bool) -> int:
    """KIP-430's field for one resource: the operations the principal may do on it, when requested."""
    if not requested:
        return NOT_REQUESTED
    mask = 0
    for op in await ctx.authorized_operations(resource, name):
        mask |= 1 << OPERATION_CODES[op]
    return mask


async def refused_first(ctx: RequestContext, group_ids: Sequence[str]) -> list[str]:
    """The groups of a describe, those the principal may not describe first: Kafka's
    handleDescribeGroupsRequest, handleConsumerGroupDescribe and handleShareGroupDescribe answer
    them before asking the coordinator of the others."""
    allowed = [await ctx.allowed(ResourceType.GROUP, g, Operation.DESCRIBE) for g in group_ids]
    return [g for g, ok in zip(group_ids, allowed, strict=True) if not ok] + [
        g for g, ok in zip(group_ids, allowed, strict=True) if ok]
