"""The per-record checks of a produced batch, with Kafka's per-record errors (KIP-467).

Kafka's `LogValidator` (Kafka 4.x, storage module) checks every record of a batch: on a compacted
topic a record needs a key (`validateKey`); on a CreateTime topic a timestamp other than -1 must lie
within [now - `message.timestamp.before.max.ms`, now + `message.timestamp.after.max.ms`]
(`validateTimestamp`), and a batch that claims LogAppendTime where the record's timestamp is not
checked is refused too. It collects every bad record of the batch, then refuses the batch
(`processRecordErrors`): INVALID_TIMESTAMP when any error is a timestamp's, else INVALID_RECORD,
with each bad record's index in its batch and message in the Produce response's `record_errors`.

The hot path stays the header's: a batch is decoded only when it is already known to be refused
(the key walk found a keyless record; the header's max timestamp is past the limit) or when the
topic sets `message.timestamp.before.max.ms` below its default (the one check the header cannot
decide, since records may be older than the batch's first). So a batch whose header understates
its max timestamp is not caught by `message.timestamp.after.max.ms` (docs/kafka-differences.md).
"""

from __future__ import annotations

from gateway.domain.topic_configs import LONG_MAX
from gateway.errors import InvalidRecord, InvalidTimestamp
from gateway.formats.records import ATTR_TIMESTAMP_LOG_APPEND, BatchHeader, iter_records, keyless_record

NO_TIMESTAMP = -1


def _long(n: int) -> int:
    """`n` as a Java long computes it (wrapping), so a far-off timestamp compares as Kafka's does."""
    return (n + 2**63) % 2**64 - 2**63


def check_records(topic: str, partition: int, batches: list[tuple[BatchHeader, memoryview]], cfg: dict[str, str],
                  now: int) -> None:
    """Raise InvalidRecord/InvalidTimestamp naming every bad record of the first batch that has one."""
    compacted = "compact" in cfg["cleanup.policy"].split(",")
    create_time = cfg["message.timestamp.type"] == "CreateTime"
    before = int(cfg["message.timestamp.before.max.ms"])
    after = int(cfg["message.timestamp.after.max.ms"])
    for h, view in batches:
        log_append = bool(h.attributes & ATTR_TIMESTAMP_LOG_APPEND)
        suspect = (compacted and keyless_record(view) >= 0) or (not create_time and log_append) or (
            create_time and (before < LONG_MAX or log_append or _long(h.max_timestamp - now) > after))
        if suspect:
            _refuse(f"{topic}-{partition}", h, view, compacted, create_time, now, before, after)


def _refuse(tp: str, h: BatchHeader, view: memoryview, compacted: bool, create_time: bool, now: int,
            before: int, after: int) -> None:
    """`LogValidator.validateRecord` over every record of one batch, then `processRecordErrors`."""
    errors: list[tuple[int, str]] = []
    timestamps = False
    log_append = bool(h.attributes & ATTR_TIMESTAMP_LOG_APPEND)
    for i, r in enumerate(iter_records(view, h.base_offset)):
        if compacted and r.key is None:
            errors.append((i, f"Compacted topic cannot accept message without key in topic partition {tp}"))
        elif create_time and r.timestamp != NO_TIMESTAMP:
            diff = _long(now - r.timestamp)
            if diff > before or _long(-diff) > after:
                timestamps = True
                errors.append((i, f"Timestamp {r.timestamp} of message with offset {r.offset} is out of range. "
                                  f"The timestamp should be within [{_long(now - before)}, {_long(now + after)}]"))
        elif log_append:
            timestamps = True
            record = (f"DefaultRecord(offset={r.offset}, timestamp={r.timestamp}, key={len(r.key or b'')} bytes, "
                      f"value={len(r.value or b'')} bytes)")
            errors.append((i, f"Invalid timestamp type in message {record}. Producer should not set timestamp "
                              f"type to LogAppendTime."))
    if not errors:
        return
    if timestamps:
        raise InvalidTimestamp("One or more records have been rejected due to invalid timestamp", errors)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    raise InvalidRecord(f"One or more records have been rejected due to {len(errors)} record errors in total, "
                        f"and only showing the first three errors at most: [{shown}]", errors)
