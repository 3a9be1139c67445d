"""`gateway serve | admin | bench`; serve's flags are the settings of `gateway.config`, each with its
`GATEWAY_*` variable."""

from __future__ import annotations

import argparse
import asyncio
import base64
import getpass
import json
import logging
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from gateway.config import SETTINGS, Config, ConfigError
from gateway.errors import GatewayError

ACL_OPERATIONS = ("read", "write", "describe", "admin", "all", "create", "delete", "alter", "describe-configs",
                  "alter-configs", "cluster-action", "idempotent-write", "create-tokens", "describe-tokens",
                  "two-phase-commit")
"""The admin API's operation names (`gateway.domain.security.Operation`), listed here so the
CLI starts without loading the domain."""


def _serve_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the gateway", description="Run the gateway. Without --redis-url it "
                       "starts an embedded redis-server (AOF on) with its files in the data dir. A flag not given "
                       "falls back to its GATEWAY_* variable, then to its default.")
    for s in SETTINGS.values():
        if s.option:
            p.add_argument(s.option, dest=s.name, metavar=s.metavar, help=s.describe().replace("%", "%%"))


def serve_config(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Config:
    """The flags given, over the `GATEWAY_*` variables (of `environ`, else the process's), over the
    defaults: every text read and checked by its setting."""
    given = {s.name: s.parse(raw) for s in SETTINGS.values() if (raw := getattr(args, s.name, None)) is not None}
    return Config.from_env(environ, **given)


def _admin_parser(sub: Any) -> None:
    p = sub.add_parser("admin", help="administer a running gateway over its admin HTTP port")
    local = f"http://127.0.0.1:{SETTINGS['admin_port'].default}"
    p.add_argument("--admin-url", default=os.environ.get("GATEWAY_ADMIN_URL", local),
                   help="the gateway's admin address (env GATEWAY_ADMIN_URL)")
    p.add_argument("--user", default=os.environ.get("GATEWAY_ADMIN_USER"),
                   help="with authentication on: an admin's user name (env GATEWAY_ADMIN_USER)")
    p.add_argument("--password", default=os.environ.get("GATEWAY_ADMIN_PASSWORD"),
                   help="that user's password (env GATEWAY_ADMIN_PASSWORD)")
    token_env = SETTINGS["admin_token"].env  # the gateway's own variable: where it runs, the CLI has it too
    p.add_argument("--token", default=os.environ.get(token_env),
                   help=f"or a token: a user's, or the gateway's admin token (env {token_env})")
    p.add_argument("--cafile", default=os.environ.get("GATEWAY_ADMIN_CAFILE"),
                   help="CA certificates to trust for an https admin URL (env GATEWAY_ADMIN_CAFILE)")
    groups = p.add_subparsers(dest="group", required=True)
    topics = groups.add_parser("topics", help="create, list, describe, alter and delete topics")
    tsub = topics.add_subparsers(dest="action", required=True)
    tsub.add_parser("list", help="every topic with its partition count")
    c = tsub.add_parser("create", help="create a topic")
    c.add_argument("name", help="the topic's name: 1-249 of [a-zA-Z0-9._-]")
    c.add_argument("--partitions", type=int,
                   help="how many, at least 1 (default: the gateway's --default-partitions)")
    c.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config, e.g. retention.ms=60000; repeat for more")

    def on_topic(action: str, what: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = tsub.add_parser(action, help=what)
        parser.add_argument("name", help="the topic")
        return parser

    on_topic("describe", "partitions with their offsets and bytes in Redis (and in tiered storage: local log start, "
                         "segments), and the effective config")
    on_topic("alter-config", "set or reset topic configs").add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE",
        help="a config to set; KEY= (empty) resets it to its default; repeat for more")
    on_topic("delete", "delete a topic and its messages")
    on_topic("watermarks", "watermarks per partition, subscription and consumer group")
    on_topic("mark-idle", "take a producer that went away out of the topic's watermark set").add_argument(
        "producer", help="the producer's name")
    groups.add_parser("gateways", help="the gateways on this Redis and the background role each runs")
    cgroups = groups.add_parser("groups", help="consumer groups of both protocols (classic and consumer)")
    gsub = cgroups.add_subparsers(dest="action", required=True)
    gsub.add_parser("list", help="every group with its type, state, epoch, members and lag per topic")
    gsub.add_parser("describe", help="a group's epochs, members with their partitions, committed offsets "
                    "and lag").add_argument("group_id", metavar="group", help="the group's id")
    shares = groups.add_parser("share-groups", help="share groups: members, start offsets, records in flight")
    shares.add_argument("group_id", metavar="GROUP", nargs="?", help="describe this group (default: list them all)")
    txns = groups.add_parser("transactions", help="list, describe and abort transactions")
    xsub = txns.add_subparsers(dest="action", required=True)
    xsub.add_parser("list", help="unfinished transactions with their age and partitions")
    xd = xsub.add_parser("describe", help="one transaction: state, age, partitions and subscriptions")
    xd.add_argument("txn", help="transaction id, COORDINATOR:SEQUENCE")
    xa = xsub.add_parser("abort", help="abort a hanging transaction nobody else can end")
    xa.add_argument("txn", help="transaction id, COORDINATOR:SEQUENCE")
    xsub.add_parser("list-transaction-keys", help="transaction keys with their epochs")
    xg = xsub.add_parser("get-transaction-key", help="a key's epoch, open transaction and age")
    xg.add_argument("key", help="KEY, or OWNER&KEY")
    xk = xsub.add_parser("delete-transaction-key", help="abort the key's transaction and remove the key")
    xk.add_argument("key", help="KEY, or OWNER&KEY")
    users = groups.add_parser("users", help="users, their passwords (SCRAM credentials) and tokens")
    usub = users.add_subparsers(dest="action", required=True)
    usub.add_parser("list", help="every user with its mechanisms and token ids")
    uc = usub.add_parser("create", help="create a user, or set its password")
    uc.add_argument("name", help="the user's name")
    uc.add_argument("--user-password", help="the password; asked for (or read from stdin) when not given")
    uc.add_argument("--no-password", action="store_true", help="a user that authenticates with tokens only")
    uc.add_argument("--mechanism", action="append", choices=("SCRAM-SHA-256", "SCRAM-SHA-512"),
                    help="credentials to keep, default both; repeat for both")
    for action, what in (("describe", "a user's mechanisms and token ids"),
                         ("delete", "delete a user and its tokens"),
                         ("create-token", "issue a token for the user (shown once)")):
        usub.add_parser(action, help=what).add_argument("name", help="the user's name")
    ut = usub.add_parser("delete-token", help="revoke one of a user's tokens")
    ut.add_argument("name", help="the user's name")
    ut.add_argument("id", help="the token's id, as users describe shows it")
    acls = groups.add_parser("acls", help="what principals may (or may not) do: read, write, describe, admin, all, "
                                          "or any other Kafka operation")
    asub = acls.add_subparsers(dest="action", required=True)
    asub.add_parser("list", help="the ACLs").add_argument("--principal",
                                                          help="only this principal's, e.g. User:alice")
    for action, what in (("add", "allow a principal an operation on a resource"),
                         ("remove", "remove such an ACL")):
        a = asub.add_parser(action, help=what)
        a.add_argument("--principal", required=True, help="User:NAME, or User:* for every authenticated user")
        a.add_argument("--operation", required=True, choices=ACL_OPERATIONS,
                       help="what it may (or, with --deny, may not) do")
        a.add_argument("--host", default="*", help="only from this IP address (default * : anywhere)")
        a.add_argument("--deny", action="store_true", help="deny rather than allow (a DENY wins over any ALLOW)")
        res = a.add_mutually_exclusive_group(required=True)
        res.add_argument("--topic", help="on this topic")
        res.add_argument("--group", dest="group_id", help="on this consumer group or native subscription")
        res.add_argument("--transactional-id", help="on this Kafka transactional id")
        res.add_argument("--cluster", action="store_true",
                         help="on the cluster: creating topics, the admin API")
        a.add_argument("--prefixed", action="store_true", help="the name is a prefix")


def _bench_parser(sub: Any) -> None:
    p = sub.add_parser("bench", help="measure the gateway beside raw Redis, in the same run",
                       description="Measure the gateway beside raw Redis, in the same run: native produce "
                       "and latency unless a benchmark is chosen. Progress goes to stderr, the table to stdout.")
    p.add_argument("--redis-url", help="benchmark against this Redis (default: an embedded one in a temp dir)")
    p.add_argument("--cluster", action="store_true",
                   help="without --redis-url: a local Redis Cluster of three primaries instead of one Redis")
    p.add_argument("--gateways", type=int, default=1,
                   help="gateway processes side by side over the same Redis (default: %(default)s)")
    p.add_argument("--workers", type=int, default=1,
                   help="with --kafka or --peer: each gateway a `gateway serve --workers N`, the clients "
                   "bootstrapping from worker 0 (default: %(default)s)")
    p.add_argument("--partitions", type=int,
                   help="partitions of the benchmark topic, and raw streams of the baselines "
                   "(default: 1; with --peer, 1 then 8)")
    p.add_argument("--seconds", type=float, default=5.0, help="time per measurement (default: %(default)s)")
    p.add_argument("--kafka", action="store_true",
                   help="Kafka-protocol produce and consume with confluent-kafka")
    p.add_argument("--acks", choices=("1", "all"), default="1",
                   help="with --kafka, all: produce with acks=1 and acks=all (min.insync.replicas 1 and 2) "
                   "on Redis with one replica, beside raw XADD and XADD+WAIT (default: %(default)s)")
    p.add_argument("--sizes", help="message sizes in bytes (default: 100,1024), with --peer 100,1024,16384")
    p.add_argument("--peer", action="store_true",
                   help="the Kafka workload through the gateway, Apache Kafka 4.4 (tests/jvm's jars) and Tansu "
                   "(the peer extra), beside raw Redis, with each server's CPU per record: produce, consume "
                   "and transactions")
    p.add_argument("--txn", action="store_true", help="Kafka transactions: commits per second and latency")
    p.add_argument("--producers", type=int, default=16,
                   help="with --txn, the transactional producers of the concurrent rows (default: %(default)s)")
    p.add_argument("--delayed", action="store_true", help="delayed delivery: memory, throughput, lateness")
    p.add_argument("--memory", action="store_true",
                   help="Redis bytes per stored record beside the payload: Kafka produce batched and one record "
                   "per batch, native produce (--sizes, default 100,1024,10240)")
    p.add_argument("--quotas", action="store_true",
                   help="client quotas: an unthrottled 100 B produce with and without quotas configured, and how "
                   "closely a 10 MB/s producer quota is held over 30 s")
    p.add_argument("--registry", action="store_true",
                   help="the Schema Registry: latency of registering a new schema and of a lookup by id, "
                   "beside a raw Redis round trip (--records schemas, default 1000)")
    p.add_argument("--console", action="store_true",
                   help="the web console: each page's load time in headless chromium (median and max of --loads) "
                   "beside its admin-API requests timed raw, on a gateway of --topics topics and --group-count groups")
    p.add_argument("--topics", type=int, default=1000, help="topics for --console (default: %(default)s)")
    p.add_argument("--group-count", type=int, default=100, help="groups for --console (default: %(default)s)")
    p.add_argument("--loads", type=int, default=20, help="loads of each page for --console (default: %(default)s)")
    p.add_argument("--read-mark", action="store_true",
                   help="what confirming a read with the replicas costs Redis and the read's latency, behind "
                   "Sentinel (PUBLISH + WAIT) and on a Cluster (a mark script + WAIT), beside the same reads "
                   "unconfirmed, on Redis nodes of its own (--records reads, default 2000)")
    p.add_argument("--append-cost", action="store_true",
                   help="Redis's CPU per appended record through the append script (plain and idempotent) beside "
                   "raw XADD+HSET and a script handed the batch alone, at 16 x 100 B, 16 x 1 KB and 1 x 16 KB "
                   "batches (--records per row, default 32000, 32 MB at most)")
    p.add_argument("--share", action="store_true",
                   help="a share group of 1, 3 and 10 consumers beside a classic group and XREADGROUP+XACK "
                   "(--records of the first --sizes)")
    p.add_argument("--key-shared", action="store_true",
                   help="native Key_Shared subscriptions of 1, 3 and 10 consumers beside shared ones and "
                   "XREADGROUP+XACK (--records, default 20000, of the first --sizes, over 100 keys)")
    p.add_argument("--tier", action="store_true",
                   help="tiered storage on the local directory and on S3 (s3s-fs, which ./dev builds): copy, "
                   "remote fetch, consume from the start and produce with copying running, each beside its "
                   "baseline (raw PUT, raw ranged GET, the same topic all in Redis, an untiered topic), and "
                   "Redis's memory for a large tiered topic")
    p.add_argument("--tier-gb", type=float, default=1.0,
                   help="with --tier, GB of the topic whose Redis memory is measured, a tenth kept in Redis; "
                   "the other rows' topic is 128 MiB, or this size if smaller (default: %(default)s)")
    p.add_argument("--object-store", metavar="URL",
                   help="with --tier, this store too: a directory or s3://bucket/prefix?endpoint=... "
                   "(credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
    p.add_argument("--watermarks", action="store_true",
                   help="broker watermarks: send_watermark, lookups, consuming past markers")
    p.add_argument("--groups", action="store_true",
                   help="seconds for a consumer group to settle after one member joins: classic against "
                   "the consumer protocol (KIP-848)")
    p.add_argument("--members", default="3,10,30", help="group sizes for --groups (default: %(default)s)")
    p.add_argument("--compaction", action="store_true",
                   help="compacted topics: produce against a delete topic, cleaner speed and memory")
    p.add_argument("--count", type=int, default=1_000_000,
                   help="delayed messages for --delayed (default: %(default)s)")
    p.add_argument("--spark", action="store_true",
                   help="the Spark source, sink and a pipeline of both (the spark extra, Java 17)")
    p.add_argument("--records", type=int,
                   help="records for --spark (default: 500000), --share (the same) and --key-shared (default: 20000), "
                   "schemas for --registry (default: 1000), reads for --read-mark (default: 2000), "
                   "records per row for --append-cost (default: 32000, 32 MB at most)")
    p.add_argument("--cores", type=int, default=2, help="local Spark cores for --spark (default: %(default)s)")


def _pairs(items: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--config takes KEY=VALUE, not {item!r}")
        out[key] = value if value != "" else None
    return out


def _credentials(args: argparse.Namespace) -> dict[str, str]:
    if args.token:
        return {"Authorization": f"Bearer {args.token}"}
    if args.user:
        basic = base64.b64encode(f"{args.user}:{args.password or ''}".encode()).decode()
        return {"Authorization": f"Basic {basic}"}
    return {}


def _request(method: str, url: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
             cafile: str | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", **(headers or {})}
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        context = ssl.create_default_context(cafile=cafile) if url.startswith("https") else None
        with urllib.request.urlopen(req, timeout=30, context=context) as resp:
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        detail = json.loads(exc.read() or b"{}")
        raise SystemExit(f"error: {detail.get('error', exc.code)}: {detail.get('message', exc.reason)}") from None
    except urllib.error.URLError as exc:
        raise SystemExit(f"error: cannot reach the gateway at {url}: {exc.reason}") from None


def admin(args: argparse.Namespace) -> Any:
    base = args.admin_url.rstrip("/") + "/admin/v2"

    def _http(method: str, url: str, body: dict[str, Any] | None = None) -> Any:
        return _request(method, url, body, _credentials(args), args.cafile)

    if args.group == "gateways":
        return _http("GET", f"{base}/gateways")
    if args.group == "share-groups":
        group = "" if args.group_id is None else "/" + urllib.parse.quote(args.group_id, safe="")
        return _http("GET", f"{base}/share-groups{group}")
    if args.group == "topics":
        if args.action == "list":
            return _http("GET", f"{base}/topics")
        if args.action == "create":
            cfg = _pairs(args.config)
            return _http("POST", f"{base}/topics",
                         {"name": args.name, "partitions": args.partitions, "config": cfg})  # None: the default
        if args.action == "describe":
            return _http("GET", f"{base}/topics/{args.name}")
        if args.action == "alter-config":
            return _http("PATCH", f"{base}/topics/{args.name}/config", _pairs(args.config))
        if args.action == "delete":
            return _http("DELETE", f"{base}/topics/{args.name}")
        if args.action == "watermarks":
            return _http("GET", f"{base}/topics/{args.name}/watermarks")
        if args.action == "mark-idle":
            producer = urllib.parse.quote(args.producer, safe="")
            return _http("POST", f"{base}/topics/{args.name}/watermarks/{producer}/idle", {})
    if args.group == "groups":
        if args.action == "list":
            return _http("GET", f"{base}/groups")
        if args.action == "describe":
            return _http("GET", f"{base}/groups/{urllib.parse.quote(args.group_id, safe='')}")
    if args.group == "transactions":
        if args.action == "list":
            return _http("GET", f"{base}/transactions")
        if args.action == "describe":
            return _http("GET", f"{base}/transactions/{args.txn}")
        if args.action == "abort":
            return _http("POST", f"{base}/transactions/{args.txn}/abort", {})
        keys_url = f"{base}/transactions/transaction-keys"
        if args.action == "list-transaction-keys":
            return _http("GET", keys_url)
        if args.action == "get-transaction-key":
            return _http("GET", f"{keys_url}/{urllib.parse.quote(args.key, safe='')}")
        if args.action == "delete-transaction-key":
            return _http("DELETE", f"{keys_url}/{urllib.parse.quote(args.key, safe='')}")
    if args.group == "users":
        user_url = f"{base}/users/{urllib.parse.quote(getattr(args, 'name', '') or '', safe='')}"
        if args.action == "list":
            return _http("GET", f"{base}/users")
        if args.action == "create":
            password = None if args.no_password else args.user_password or _ask_password(args.name)
            return _http("PUT", user_url, {"password": password, "mechanisms": args.mechanism})
        if args.action == "describe":
            return _http("GET", user_url)
        if args.action == "delete":
            return _http("DELETE", user_url)
        if args.action == "create-token":
            return _http("POST", f"{user_url}/tokens", {})
        if args.action == "delete-token":
            return _http("DELETE", f"{user_url}/tokens/{urllib.parse.quote(args.id, safe='')}")
    if args.group == "acls":
        if args.action == "list":
            query = f"?principal={urllib.parse.quote(args.principal)}" if args.principal else ""
            return _http("GET", f"{base}/acls{query}")
        kind, name = next((k, v) for k, v in (("topic", args.topic), ("group", args.group_id),
                                              ("transactional-id", args.transactional_id),
                                              ("cluster", "kafka-cluster" if args.cluster else None)) if v)
        acl = {"principal": args.principal, "resource_type": kind, "resource_name": name,
               "operation": args.operation, "pattern": "prefixed" if args.prefixed else "literal"}
        if args.host != "*":
            acl["host"] = args.host
        if args.deny:
            acl["permission"] = "deny"
        return _http("POST" if args.action == "add" else "DELETE", f"{base}/acls", acl)
    raise SystemExit(f"unknown admin command {args.group} {args.action}")


def _ask_password(user: str) -> str:
    """From the terminal (asked twice), or the first line of stdin when it is not a terminal."""
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\n")
    first = getpass.getpass(f"password for {user}: ")
    if getpass.getpass("again: ") != first:
        raise SystemExit("error: the passwords differ")
    return first


def serve(config: Config) -> None:
    """One gateway, or with `--workers` above 1 their supervisor (`gateway.server.workers`)."""
    from gateway.server.gateway import Gateway, loop_factory
    from gateway.server.workers import LOG_FORMAT, Supervisor

    logging.basicConfig(level=config.log_level.upper(), format=LOG_FORMAT)
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        try:
            runner.run(Supervisor(config).run() if config.workers > 1 else Gateway(config).run())
        except KeyboardInterrupt:
            pass
        except GatewayError as exc:  # a start-up failure the user can act on: one line, no traceback
            raise SystemExit(f"gateway: {exc}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description="A Kafka-compatible gateway on Redis Streams")
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    _admin_parser(sub)
    _bench_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "serve":
        try:
            config = serve_config(args)
        except ConfigError as exc:
            parser.exit(2, f"gateway serve: error: {exc}\n")
        serve(config)
    elif args.command == "admin":
        json.dump(admin(args), sys.stdout, indent=2)
        print()
    elif args.command == "bench":
        from gateway.bench import run_bench

        run_bench(args)
