"""`gateway bench`: the gateway measured beside raw Redis, in the same run, on the same Redis.

The gateway runs as its own process (as users run it), over an embedded Redis in a temporary
directory unless `--redis-url` names one (`--cluster`: a local three-primary Redis Cluster);
`--gateways N` runs N of them side by side, the clients bootstrapping from all. Every figure is
printed beside its raw-Redis baseline, spread over as many streams as the topic has partitions,
and the ratio between them.

One module per benchmark (`native`, `kafka`, `txn`, `delayed`, `watermarks`, `spark`, `share`, `key_shared`, `groups`,
`peer`, `compaction`, `memory`, `quotas`, `registry`, `tier`, `console`, `read_mark`, `append_cost`), each on `common` alone; this one only picks among them.
"""

from __future__ import annotations

import argparse

from gateway.bench import (
    append_cost,
    compaction,
    console,
    delayed,
    groups,
    kafka,
    key_shared,
    memory,
    native,
    peer,
    quotas,
    read_mark,
    registry,
    share,
    spark,
    tier,
    txn,
    watermarks,
)
from gateway.bench.common import Progress, Row, bench_redis, print_table


def run_bench(args: argparse.Namespace) -> None:
    """Run the benchmark the options of `gateway bench` ask for and print its table."""
    sizes = [int(s) for s in str(args.sizes or (peer.SIZES if args.peer else "100,1024")).split(",")]
    seconds = float(args.seconds)
    partitions = args.partitions or 1
    note = ""
    if args.read_mark:  # its own Redis: a primary with a replica, and a Cluster with a replica per primary
        print(read_mark.format_rows(read_mark.measure_read_mark(args.records or read_mark.READS)))
        return
    with Progress(seconds), bench_redis(args.redis_url, args.cluster) as url:
        if args.delayed:
            print(delayed.format_metrics(delayed.measure_delayed(url, args.count)))
            return
        if args.append_cost:
            print(append_cost.format_rows(append_cost.measure_append_cost(url, args.records or append_cost.RECORDS)))
            return
        if args.memory:
            print(memory.format_rows(memory.measure_memory(url, [int(s) for s in str(args.sizes or "100,1024,10240").split(",")])))
            return
        if args.console:
            print(console.format_rows(console.measure_console(url, args.topics, args.group_count, args.loads),
                                      args.topics, args.group_count))
            return
        if args.groups:
            print(groups.format_rows(groups.measure_groups(url, [int(n) for n in str(args.members).split(",")])))
            return
        rows: list[Row]
        if args.compaction:
            rows, note = compaction.measure_compaction(url, sizes, seconds)
        elif args.watermarks:
            rows, note = watermarks.measure_watermarks(url, seconds), watermarks.NOTE
        elif args.spark:
            rows = spark.measure_spark(url, count=args.records or 500_000, size=sizes[0], partitions=partitions,
                                       cores=args.cores, seconds=seconds)
        elif args.tier:
            rows, note = tier.measure_tier(url, seconds, args.object_store,
                                           tier.Sizes.for_memory(args.tier_gb))
        elif args.quotas:
            rows = quotas.measure_quotas(url, seconds)
        elif args.registry:
            rows = registry.measure_registry(url, args.records or registry.SCHEMAS)
        elif args.share:
            rows = share.measure_share(url, sizes[0], args.records or 500_000)
        elif args.key_shared:
            rows = key_shared.measure_key_shared(url, sizes[0], args.records or key_shared.RECORDS, partitions)
        elif args.txn:
            rows, note = txn.measure_txn(url, seconds, args.producers), txn.NOTE
        elif args.kafka and args.acks == "all":
            rows, note = kafka.measure_acks(url, sizes, seconds, partitions), kafka.ACKS_NOTE
        elif args.peer:
            rows, note = peer.measure_peer(url, sizes, seconds, args.workers,
                                             (args.partitions,) if args.partitions else peer.PARTITIONS), peer.NOTE
        elif args.kafka:
            rows = kafka.measure_kafka(url, sizes, seconds, partitions, args.gateways, args.workers)
        else:
            rows = native.measure_native(url, sizes, seconds, partitions, args.gateways)
    if note:
        print(note)
    print_table(rows)
