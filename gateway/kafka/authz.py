"""Authorization rules that several Kafka APIs share; the rest are one `ctx.allowed` call in place."""

from __future__ import annotations

from gateway.domain.security import CLUSTER_NAME, Operation, ResourceType
from gateway.kafka.dispatch import RequestContext


async def may_create_topic(ctx: RequestContext, name: str, *, auto: bool = False) -> bool:
    """Admin on the topic or on the cluster; creation on first use (`auto`) also for a writer."""
    return (
        await ctx.allowed(ResourceType.TOPIC, name, Operation.ADMIN)
        or (auto and await ctx.allowed(ResourceType.TOPIC, name, Operation.WRITE))
        or await ctx.allowed(ResourceType.CLUSTER, CLUSTER_NAME, Operation.ADMIN)
    )


async def may_describe_cluster(ctx: RequestContext) -> bool:
    return await ctx.allowed(ResourceType.CLUSTER, CLUSTER_NAME, Operation.DESCRIBE)
