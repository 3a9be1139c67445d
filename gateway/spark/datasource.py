"""The data source Spark knows as "gateway": one name for reads, streams and the exactly-once sink."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from gateway.spark.options import SourceOptions
from gateway.spark.source import SCHEMA, GatewayBatchReader, GatewayStreamReader, check_schema


class GatewayDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "gateway"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        check_schema(schema)
        return GatewayBatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        check_schema(schema)
        return GatewayStreamReader(SourceOptions.parse(self.options, streaming=True))
