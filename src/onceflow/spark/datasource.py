"""``format("onceflow")``: one Python data source with a batch reader, a stream reader and a stream
writer. Spark creates it from the user's options; each part parses and validates its own options."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource

from onceflow.spark.options import parse_sink_options, parse_source_options
from onceflow.spark.range_reader import SPARK_SCHEMA_DDL
from onceflow.spark.sink import OnceflowStreamWriter
from onceflow.spark.source import OnceflowBatchReader, OnceflowStreamReader

__all__ = ["OnceflowDataSource"]


class OnceflowDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "onceflow"

    def schema(self) -> str:
        return SPARK_SCHEMA_DDL

    def reader(self, schema) -> OnceflowBatchReader:
        return OnceflowBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema) -> OnceflowStreamReader:
        return OnceflowStreamReader(parse_source_options(self.options, streaming=True))

    def streamWriter(self, schema, overwrite: bool) -> OnceflowStreamWriter:
        return OnceflowStreamWriter(parse_sink_options(self.options))
