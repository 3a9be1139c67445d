"""A Spark driver for the crash tests, in a process (and JVM) of its own that a test can kill:
copies one topic to another with the gateway source and sink, Trigger.AvailableNow, then exits.

    python -m tests.spark_driver URL SOURCE_TOPIC SINK_TOPIC CHECKPOINT MAX_RECORDS_PER_TRIGGER
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from gateway.spark import register


def main(url: str, source: str, sink: str, checkpoint: str, per_trigger: str) -> None:
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("gateway-crash-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    query = (
        spark.readStream.format("gateway").option("url", url).option("topic", source)
        .option("startingOffsets", "earliest").option("maxRecordsPerTrigger", per_trigger)
        .load()
        .select("key", "value")
        .writeStream.format("gateway").option("url", url).option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    print(f"query {query.id} started", flush=True)
    query.awaitTermination()
    print("query finished", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
