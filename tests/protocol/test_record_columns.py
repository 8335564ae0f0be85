"""The columnar decode (split_batches + decode_columns / decode_control) agrees with decode_batches."""

import pytest

from onceflow.protocol.compression import CompressionType
from onceflow.protocol.errors import CorruptMessage
from onceflow.protocol.record_codec import (
    ProducerRecord,
    decode_batches,
    decode_columns,
    decode_control,
    encode_batch,
    split_batches,
)
from onceflow.protocol.records import build_control_batch


def _fetch_like_buffer(codec: int) -> bytes:
    first = encode_batch(
        [(b"k%d" % i, b"v%d" % i) for i in range(5)], compression=codec, base_offset=10, timestamp_ms=1000
    )
    second = encode_batch(
        [
            ProducerRecord(None, b"x", [("h", b"1"), ("g", None)], 2000),
            ProducerRecord(b"k", None, (), 2001),
        ],
        compression=codec,
        base_offset=15,
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    marker = build_control_batch(7, 0, commit=True, coordinator_epoch=3, timestamp_ms=3000, base_offset=17)
    return first + second + marker + first[:30]  # ends in a partial batch, as a fetch may


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD])
def test_columns_hold_what_decode_batches_holds(codec):
    buf = _fetch_like_buffer(codec)
    expected = list(decode_batches(buf))
    pairs = list(split_batches(buf))
    assert [h for h, _ in pairs] == [b.header for b in expected]
    for (header, batch), decoded in zip(pairs[:2], expected[:2], strict=True):
        columns = decode_columns(header, batch)
        assert columns.offsets == [r.offset for r in decoded.records]
        assert columns.timestamps == [r.timestamp for r in decoded.records]
        assert columns.keys == [r.key for r in decoded.records]
        assert columns.values == [r.value for r in decoded.records]
    assert decode_columns(*pairs[0]).headers is None  # no record has headers
    assert decode_columns(*pairs[1]).headers == [[("h", b"1"), ("g", None)], []]
    assert decode_control(*pairs[2]) == expected[2].control


def test_split_batches_checks_the_crc():
    buf = bytearray(encode_batch([(b"k", b"value")]))
    buf[-1] ^= 0xFF
    with pytest.raises(CorruptMessage, match="CRC32C"):
        list(split_batches(buf))
    header, batch = next(split_batches(buf, check_crc=False))
    assert header.record_count == 1
