"""PySpark integration: the ``onceflow`` streaming source and sink, and the pipeline runner.

``onceflow.spark.register(spark)`` makes ``format("onceflow")`` available on a SparkSession. This
package uses only :mod:`onceflow.client` to talk to brokers, so it works with any Kafka-protocol
broker as well as with onceflow's own.
"""

from __future__ import annotations

__all__ = ["register"]


def register(spark) -> None:
    """Register the ``onceflow`` data source (reader and writer) on ``spark``."""
    from onceflow.spark.datasource import OnceflowDataSource

    spark.dataSource.register(OnceflowDataSource)
