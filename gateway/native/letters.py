"""Native consumers' dead-letter policies (Subscribe's DeadLetterPolicy) and ReconsumeLater, over
the one dead-letter mechanism both faces use (`gateway.domain.dead_letter`)."""

from __future__ import annotations

from weakref import WeakKeyDictionary

from gateway.domain.dead_letter import LetterPolicy, Letters
from gateway.domain.security import Operation, ResourceType
from gateway.domain.subscriptions import Consumer
from gateway.errors import NotAllowed
from gateway.native.dispatch import Session, handles
from gateway.pb import gateway_pb2 as pb

# a consumer's policy, as its Subscribe gave it: configuration of the connection, like its ack
# timeout, sent again by the client with every Subscribe after a reconnect
_policies: WeakKeyDictionary[Consumer, LetterPolicy] = WeakKeyDictionary()


def _letters(s: Session) -> Letters:
    return Letters(s.services.log, s.services.delay, s.services.txn)


async def authorize(s: Session, r: pb.Subscribe) -> LetterPolicy | None:
    """The Subscribe's policy, its topics resolved; the principal must be allowed to write them, as
    Pulsar's client writes them with its own credentials."""
    if not r.HasField("dead_letter"):
        return None
    p = r.dead_letter
    policy = LetterPolicy.resolve(r.topic, r.subscription, p.max_redeliver_count, p.dead_letter_topic,
                                  p.retry_letter_topic)
    for topic in (policy.dead_letter_topic, policy.retry_letter_topic):
        await s.authorize(ResourceType.TOPIC, topic, Operation.WRITE)
    return policy


def attach(s: Session, consumer: Consumer, policy: LetterPolicy | None) -> None:
    """The subscription follows the policy of the consumer attached last."""
    if policy is None or consumer.subscription is None:
        return
    _policies[consumer] = policy
    _letters(s).attach(consumer.subscription, policy)


@handles("reconsume_later")
async def reconsume_later(s: Session, req: pb.Request) -> pb.Response:
    r = req.reconsume_later
    consumer = s.consumer(r.consumer_id)
    policy = _policies.get(consumer)
    if policy is None:
        raise NotAllowed("reconsume_later needs a consumer subscribed with a dead-letter policy")
    await _letters(s).reconsume_later(consumer, r.partition, r.offset, r.delay_ms, policy)
    return pb.Response(success=pb.Success())
