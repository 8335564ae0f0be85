"""Record batches for the log tests, built by aiokafka's encoder (independent of onceflow.protocol)."""

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from onceflow.protocol import records


def make_batch(n=1, *, timestamp=1_000, value=b"v", compression=0, step_ms=1) -> bytearray:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=10**8,
    )
    for i in range(n):
        builder.append(i, timestamp=timestamp + i * step_ms, key=None, value=value, headers=[])
    return bytearray(builder.build())


def produce(log, *raw_batches, **kwargs):
    """Validate and append the concatenation of ``raw_batches`` as one produce call."""
    return log.append(records.validate_produce_records(bytearray().join(raw_batches)), **kwargs)


def decode(data: bytes) -> list[tuple[int, bytes, int]]:
    """``(offset, value, timestamp)`` of every record in ``data``, via aiokafka's decoder (CRC-checked)."""
    out = []
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        size = records.batch_size_at(view, pos)
        batch = DefaultRecordBatch(bytes(view[pos : pos + size]))
        assert batch.validate_crc()
        out.extend((r.offset, r.value, r.timestamp) for r in batch)
        pos += size
    return out
