"""Pipeline functions the Spark tests run through ``--app tests.spark.apps:NAME``."""

from __future__ import annotations

from pyspark.sql import functions as F


def upper_values(df):
    """Deterministic per-record map: key kept, value upper-cased."""
    return df.select(F.col("key"), F.upper(F.col("value").cast("string")).alias("value"))


def upper_values_same_partition(df):
    """``upper_values``, written to the output partition numbered like the input partition: every
    output partition then has one writer per batch, so its order is deterministic across runs."""
    return df.select(F.col("key"), F.upper(F.col("value").cast("string")).alias("value"), F.col("partition"))


OUTPUT_SCHEMA = "key BINARY, value STRING, partition INT"


def batch_tagged(df):
    """``upper_values_same_partition`` with each value prefixed by its micro-batch id (``"3|V17"``), and
    the task of input partition 1 finishing 1.5 s after its last row: the two tasks of a batch end
    apart, so a reader can tell a batch committed whole from one committed task by task."""
    import time

    from pyspark import TaskContext

    def tag(batches):
        import pyarrow as pa
        import pyarrow.compute as pc

        context = TaskContext.get()
        batch_id = context.getLocalProperty("streaming.sql.batchId")
        for batch in batches:
            values = pc.binary_join_element_wise(pa.scalar(f"{batch_id}|"), batch.column("value"), "")
            yield batch.set_column(1, "value", values)
        if context.partitionId() == 1:
            time.sleep(1.5)

    return upper_values_same_partition(df).mapInArrow(tag, OUTPUT_SCHEMA)
