"""The data source Spark knows as "gateway": one name for reads, streams and the exactly-once sink."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from gateway.spark import sink, source
from gateway.spark.options import OptionError, SinkOptions, SourceOptions


class GatewayDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "gateway"

    def schema(self) -> StructType:
        return source.SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        source.check_schema(schema)
        return source.GatewayBatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        source.check_schema(schema)
        return source.GatewayStreamReader(SourceOptions.parse(self.options, streaming=True))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        opts = SinkOptions.parse(self.options)
        sink.check_schema(schema, opts)
        return sink.GatewayStreamWriter(opts)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise OptionError("a topic is appended to, never overwritten: use mode append")
        opts = SinkOptions.parse(self.options)
        sink.check_schema(schema, opts)
        return sink.GatewayBatchWriter(opts)
