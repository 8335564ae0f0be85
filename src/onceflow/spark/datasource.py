"""``format("onceflow")``: one Python data source with a batch reader and writer, a stream reader and
a stream writer. Spark creates it from the user's options; every part validates its options when it is
made, and ``schema()`` (which Spark calls in ``load()``) validates the source's, so that a bad option
fails ``load()`` itself."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource

from onceflow.spark.options import parse_source_options
from onceflow.spark.range_reader import source_schema_ddl, source_schema_fields
from onceflow.spark.sink import OnceflowBatchWriter, OnceflowStreamWriter
from onceflow.spark.sink_options import check_sink_schema, parse_sink_options
from onceflow.spark.source import OnceflowBatchReader, OnceflowStreamReader

__all__ = ["OnceflowDataSource"]


class OnceflowDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "onceflow"

    def schema(self) -> str:
        # Called by load() for reads of either kind, which it cannot tell apart: what is wrong for
        # both is refused here (with the message for the kind the options look like), what is wrong
        # for one kind only when its reader is made.
        try:
            options = parse_source_options(self.options, streaming=False, warn=False)
        except ValueError as batch_error:
            try:
                options = parse_source_options(self.options, streaming=True, warn=False)
            except ValueError as stream_error:
                raise (stream_error if _looks_streaming(self.options) else batch_error) from None
        return source_schema_ddl(options.include_headers)

    def _source_options(self, schema, *, streaming: bool):
        options = parse_source_options(self.options, streaming=streaming)
        wanted = source_schema_fields(options.include_headers)
        given = [(f.name, f.dataType.simpleString()) for f in schema.fields]
        if given != wanted:
            raise ValueError(
                "the onceflow source has a fixed schema (Kafka's columns: "
                f"{source_schema_ddl(options.include_headers)}); do not set one with .schema(...)"
            )
        return options

    def reader(self, schema) -> OnceflowBatchReader:
        return OnceflowBatchReader(self._source_options(schema, streaming=False))

    def streamReader(self, schema) -> OnceflowStreamReader:
        return OnceflowStreamReader(self._source_options(schema, streaming=True))

    def writer(self, schema, overwrite: bool) -> OnceflowBatchWriter:
        if overwrite:
            raise ValueError(
                'a Kafka topic cannot be overwritten: write with .mode("append") (records are added)'
            )
        options = parse_sink_options(self.options)
        check_sink_schema(schema, options.topic)
        return OnceflowBatchWriter(options)

    def streamWriter(self, schema, overwrite: bool) -> OnceflowStreamWriter:
        # overwrite is complete mode: each batch writes the whole result again, as Spark's Kafka sink.
        options = parse_sink_options(self.options)
        check_sink_schema(schema, options.topic)
        return OnceflowStreamWriter(options)


def _looks_streaming(options) -> bool:
    """Whether options that fail both ways were meant for a stream (to pick the error to show)."""
    names = {str(k).lower(): str(v) for k, v in options.items()}
    starting = names.get("startingoffsets", "").strip().lower()
    return starting == "latest" or any(n in names for n in ("maxoffsetspertrigger", "minoffsetspertrigger"))
