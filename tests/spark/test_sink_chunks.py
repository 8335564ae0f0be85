"""The sink's columnar path: which Arrow batches become one OutputChunk, and that a chunk is written
(and replayed) exactly once like the same records one by one."""

from __future__ import annotations

import pyarrow as pa
import pytest
from tests.spark.test_exactly_once_protocol import TID, ModelCluster, ModelWriter

from onceflow.spark.exactly_once import OutputChunk, OutputRecord, write_exactly_once
from onceflow.spark.sink import output_items

HEADERS = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def test_one_topic_without_partitions_becomes_one_chunk():
    batch = pa.RecordBatch.from_pydict(
        {
            "key": pa.array([b"a", None, b"c"], pa.binary()),
            "value": pa.array(["x", "y", None], pa.string()),
            "headers": pa.array([[{"key": "h", "value": b"1"}], [], None], HEADERS),
        }
    )
    (chunk,) = output_items(batch, "out")
    assert chunk == OutputChunk("out", [b"a", None, b"c"], [b"x", b"y", None], [[("h", b"1")], None, None])


def test_a_topic_column_is_a_chunk_per_topic_in_row_order():
    uniform = pa.RecordBatch.from_pydict({"value": [b"1", b"2"], "topic": ["t", "t"]})
    assert list(output_items(uniform, None)) == [OutputChunk("t", None, [b"1", b"2"], None)]
    mixed = pa.RecordBatch.from_pydict(
        {"value": [b"1", b"2", b"3"], "key": [b"a", b"b", b"c"], "topic": ["t", "u", "t"]}
    )
    assert list(output_items(mixed, None)) == [
        OutputChunk("t", [b"a", b"c"], [b"1", b"3"], None),
        OutputChunk("u", [b"b"], [b"2"], None),
    ]
    # The topic option wins over the column; a row with no topic is named.
    assert list(output_items(mixed, "out")) == [
        OutputChunk("out", [b"a", b"b", b"c"], [b"1", b"2", b"3"], None)
    ]
    with pytest.raises(ValueError, match="row 1 has a null topic"):
        list(output_items(pa.RecordBatch.from_pydict({"value": [b"1", b"2"], "topic": ["t", None]}), None))


def test_a_partition_column_keeps_records():
    batch = pa.RecordBatch.from_pydict({"value": [b"1", b"2"], "partition": pa.array([1, 0], pa.int32())})
    assert list(output_items(batch, "out")) == [
        OutputRecord("out", None, b"1", (), 1),
        OutputRecord("out", None, b"2", (), 0),
    ]


def test_missing_value_or_topic_is_refused():
    with pytest.raises(ValueError, match='"value" column'):
        list(output_items(pa.RecordBatch.from_pydict({"key": [b"k"]}), "out"))
    with pytest.raises(ValueError, match="say where to write"):
        list(output_items(pa.RecordBatch.from_pydict({"value": [b"v"]}), None))


def test_chunks_are_written_once_and_skipped_on_replay_by_a_writer_without_send_chunk():
    cluster = ModelCluster()
    chunk = OutputChunk("out", [b"k0", None], [b"v0", b"v1"], None)
    first = write_exactly_once(ModelWriter(cluster, TID), 0, [chunk, OutputRecord("out", None, b"v2")])
    assert (first.records, first.skipped) == (3, False)
    assert [r.value for r in cluster.committed] == [b"v0", b"v1", b"v2"]
    assert cluster.committed[0] == OutputRecord("out", b"k0", b"v0")
    replay = write_exactly_once(ModelWriter(cluster, TID), 0, [chunk])
    assert replay.skipped and len(cluster.committed) == 3


def test_a_writer_with_send_chunk_gets_the_chunk_whole():
    class ChunkWriter(ModelWriter):
        chunks: list = []

        def send_chunk(self, chunk: OutputChunk) -> None:
            self.chunks.append(chunk)

    chunk = OutputChunk("out", None, [b"a", b"b"], None)
    writer = ChunkWriter(ModelCluster(), TID)
    assert write_exactly_once(writer, 0, [chunk]).records == 2
    assert writer.chunks == [chunk]
