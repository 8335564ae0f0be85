"""Offset and time indexes: lookups and the file formats."""

import struct

from onceflow.log.index import OffsetIndex, TimeIndex


def test_offset_index_lookup_and_format():
    index = OffsetIndex(100)
    for last_offset, position in [(104, 0), (109, 500), (120, 1200)]:
        index.append(last_offset, position)
    index.append(109, 9999)  # not increasing: ignored
    assert len(index) == 3
    assert index.lookup(100) == 0
    assert index.lookup(109) == 500
    assert index.lookup(115) == 500
    assert index.lookup(10**6) == 1200
    assert index.position_floor(1199) == 500
    data = index.to_bytes()
    assert data[:8] == struct.pack(">ii", 4, 0)
    assert data[8:16] == struct.pack(">ii", 9, 500)
    loaded = OffsetIndex.from_bytes(100, data, segment_size=2000)
    assert loaded.last_entry() == (120, 1200)
    assert OffsetIndex.from_bytes(100, data, segment_size=1000) is None  # points past the file
    assert OffsetIndex.from_bytes(100, data[:-1], segment_size=2000) is None
    assert OffsetIndex.from_bytes(100, data[8:16] + data[:8], segment_size=2000) is None
    index.truncate_to_position(500)
    assert index.last_entry() == (104, 0)


def test_time_index_lookup_and_format():
    index = TimeIndex(0)
    index.maybe_append(1_000, 4)
    index.maybe_append(900, 6)  # timestamp did not grow: no entry
    index.maybe_append(2_000, 9)
    assert len(index) == 2
    assert index.offset_before(1_000) is None
    assert index.offset_before(1_001) == 4
    assert index.offset_before(10**9) == 9
    data = index.to_bytes()
    assert data[:12] == struct.pack(">qi", 1_000, 4)
    assert TimeIndex.from_bytes(0, data).last_entry() == (2_000, 9)
    assert TimeIndex.from_bytes(0, data[12:] + data[:12]) is None
    index.truncate_to(9)
    assert index.last_entry() == (1_000, 4)
