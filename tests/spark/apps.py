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
