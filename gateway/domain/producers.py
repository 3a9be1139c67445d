"""Producer registration for the native face: a topic check and a fresh, never reused producer id.

Native producers are idempotent with epoch 0 and a sequence per partition: the append script's
dedupe turns a client's retry of a batch into the original offsets instead of a second copy.
"""

from __future__ import annotations

from gateway.domain.log import LogService
from gateway.store.log import TopicInfo


class ProducerService:
    def __init__(self, log_service: LogService) -> None:
        self.log = log_service

    async def register(self, topic: str, resume_producer_id: int = 0) -> tuple[int, TopicInfo]:
        """(producer id, topic); a resumed id keeps deduplicating the client's earlier batches."""
        info = await self.log.topic(topic)
        pid = resume_producer_id if resume_producer_id > 0 else await self.log.allocate_producer_id()
        return pid, info
