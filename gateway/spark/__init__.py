"""PySpark connector (the `spark` extra): `spark.read.format("gateway")`, `spark.readStream.format("gateway")`
and, exactly once, `df.writeStream.format("gateway")`, all through the native client.

    from gateway.spark import register
    register(spark)
    events = (spark.readStream.format("gateway")
              .option("url", "gateway://localhost:6650").option("topic", "events").load())
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.spark.datasource import GatewayDataSource
from gateway.spark.source import SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SCHEMA", "GatewayDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Make the "gateway" format known to this session."""
    spark.dataSource.register(GatewayDataSource)
