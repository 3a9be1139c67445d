"""ListTopics: the topic names a pattern consumer (Pulsar's topicsPattern) subscribes to, matched as
the Kafka face's KIP-848 regex subscriptions are (`gateway.domain.groups.topic_regex`)."""

from __future__ import annotations

from gateway.domain.groups.errors import GroupError
from gateway.domain.groups.topic_regex import matching
from gateway.domain.security import Operation, ResourceType
from gateway.errors import InvalidRequest
from gateway.native.dispatch import Session, handles
from gateway.pb import gateway_pb2 as pb


@handles("list_topics")
async def list_topics(s: Session, req: pb.Request) -> pb.Response:
    names = [t.name for t in await s.services.log.list_topics()]
    try:
        found = matching(req.list_topics.pattern or ".*", names)
    except GroupError as exc:
        raise InvalidRequest(str(exc)) from None
    security = s.services.security
    allowed = [t for t in found
               if await security.authorize(s.principal, ResourceType.TOPIC, t, Operation.DESCRIBE, s.host)]
    return pb.Response(topics=pb.Topics(names=allowed))
