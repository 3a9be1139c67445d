"""The object-store contract (gateway/store/objects) over both backends: the local directory and S3
against s3s-fs, a real S3-compatible server (gateway/bench/s3_server.py, built by ./dev test), so the
tiering code can treat them alike. Then what only a network store does: go away and come back."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gateway.bench.s3_server import S3Server
from gateway.store.objects import ObjectNotFound, ObjectStore, ObjectStoreUnavailable
from gateway.store.objects.local import LocalDirStore
from gateway.store.objects.open import open_object_store
from gateway.store.objects.s3 import S3Store

PAGE = 25  # keys per S3 listing page here, so a listing of 60 keys takes three pages


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with S3Server(tmp_path_factory.mktemp("s3") / "root") as server:
        yield server


def s3_store(server: S3Server, prefix: str, timeout_s: float = 5.0, attempts: int = 3) -> S3Store:
    return S3Store(server.bucket, prefix, endpoint=server.endpoint, access_key_id=server.access_key,
                   secret_access_key=server.secret_key, timeout_s=timeout_s, attempts=attempts,
                   list_page_size=PAGE)


@pytest.fixture(params=["local", "s3"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ObjectStore]:
    """Each backend, empty: a fresh directory, or a fresh prefix in the server's bucket."""
    if request.param == "local":
        backend: ObjectStore = LocalDirStore(tmp_path / "tier")
    else:
        backend = s3_store(request.getfixturevalue("s3_server"), f"t-{uuid.uuid4().hex[:8]}/segments")
    yield backend
    await backend.close()


async def test_put_get_and_ranges_at_the_edges(store: ObjectStore) -> None:
    data = bytes(range(256)) * 40  # 10240 bytes
    await store.put("topic/0/00000000000000000000.log", data)
    key = "topic/0/00000000000000000000.log"
    assert await store.get(key) == data
    assert await store.get_range(key, 0, len(data)) == data
    assert await store.get_range(key, 1000, 17) == data[1000:1017]
    assert await store.get_range(key, len(data) - 5, 100) == data[-5:]  # fewer only at the end
    assert await store.get_range(key, len(data) - 1, 1) == data[-1:]
    assert await store.get_range(key, len(data), 10) == b""
    assert await store.get_range(key, len(data) + 7, 10) == b""
    assert await store.get_range(key, 3, 0) == b""
    with pytest.raises(ValueError):
        await store.get_range(key, -1, 10)
    await store.put(key, b"replaced")  # a put is whole: no tail of the longer object survives
    assert await store.get(key) == b"replaced"
    await store.put("empty", b"")
    assert await store.get("empty") == b""
    view = memoryview(data)  # a segment comes as its batches' buffers, more than one writev takes
    await store.put(key, *(view[i: i + 3] for i in range(0, len(data), 3)), b"", b"tail")
    assert await store.get(key) == data + b"tail"


async def test_absent_keys_and_idempotent_deletes(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound):
        await store.get("nope/1.log")
    with pytest.raises(ObjectNotFound):
        await store.get_range("nope/1.log", 0, 10)
    with pytest.raises(ObjectNotFound):
        await store.get_range("nope/1.log", 0, 0)
    await store.delete("nope/1.log")
    await store.put("a/b.log", b"x")
    await store.delete("a/b.log")
    await store.delete("a/b.log")
    with pytest.raises(ObjectNotFound):
        await store.get("a/b.log")
    assert await store.list("") == []


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "../up", "a/./b", "a/.."])
async def test_keys_that_name_no_object_are_refused(store: ObjectStore, key: str) -> None:
    with pytest.raises(ValueError):
        await store.put(key, b"x")


async def test_list_by_prefix_across_pages(store: ObjectStore) -> None:
    keys = [f"orders/3/{i:020d}.log" for i in range(60)]
    await asyncio.gather(*(store.put(k, k.encode()) for k in keys))
    await store.put("orders/30/00000000000000000000.log", b"a sibling prefix")
    await store.put("payments/0/00000000000000000000.log", b"another topic")
    listed = await store.list("orders/3/")
    assert [o.key for o in listed] == keys
    assert all(o.size == len(o.key) and o.modified_ms > 0 for o in listed)
    assert len(await store.list("orders/3")) == 61
    assert [o.key for o in await store.list("")] == [*keys, "orders/30/00000000000000000000.log",
                                                      "payments/0/00000000000000000000.log"]
    assert await store.list("orders/4/") == []


async def test_concurrent_and_large_puts(store: ObjectStore) -> None:
    blobs = {f"c/{i}.log": bytes([i]) * (100_000 + i) for i in range(16)}
    await asyncio.gather(*(store.put(k, v) for k, v in blobs.items()))
    assert await asyncio.gather(*(store.get(k) for k in blobs)) == list(blobs.values())
    large = uuid.uuid4().bytes * (24 * 2**20 // 16)  # 24 MiB: a segment of the larger kind
    await store.put("large.log", large)
    assert await store.get_range("large.log", len(large) - 2**20, 2**20) == large[-2**20:]
    assert await store.get_range("large.log", 12 * 2**20 + 3, 4096) == large[12 * 2**20 + 3:12 * 2**20 + 4099]
    assert await store.get("large.log") == large


async def test_an_s3_store_away_fails_promptly_and_retriably_then_works_again(tmp_path: Path) -> None:
    """Killed (connections refused) and stopped (connections accepted, never answered): both raise
    ObjectStoreUnavailable after the configured attempts rather than hanging; restarted on the same
    port and data, the same store object works again."""
    server = S3Server(tmp_path / "root").start()
    store = s3_store(server, "seg", timeout_s=0.5, attempts=2)
    try:
        await store.put("p/0.log", b"before")
        server.kill()
        with pytest.raises(ObjectStoreUnavailable):
            await store.get("p/0.log")
        server.start()
        assert await store.get("p/0.log") == b"before"
        server.pause()
        with pytest.raises(ObjectStoreUnavailable):
            await store.get_range("p/0.log", 0, 3)
        server.resume()
        await store.put("p/1.log", b"after")
        assert [o.key for o in await store.list("p/")] == ["p/0.log", "p/1.log"]
    finally:
        await store.close()
        server.stop()


async def test_wrong_credentials_are_unavailable_not_missing(s3_server: S3Server) -> None:
    store = S3Store(s3_server.bucket, "x", endpoint=s3_server.endpoint, access_key_id=s3_server.access_key,
                    secret_access_key="not-the-secret", attempts=1)
    with pytest.raises(ObjectStoreUnavailable, match="SignatureDoesNotMatch"):
        await store.get("k")
    await store.close()


async def test_open_object_store_reads_s3_urls_and_the_aws_variables(
        s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    from_env = open_object_store(f"s3://{s3_server.bucket}/gw/tier")
    await from_env.put("k", b"v")
    assert s3_server.secret_key not in from_env.description and s3_server.endpoint in from_env.description
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    from_url = open_object_store(f"s3://{s3_server.bucket}/gw/tier/?endpoint={s3_server.endpoint}&timeout=2&attempts=1")
    assert await from_url.get("k") == b"v"
    assert (tmp_path / "root").exists() is False  # the objects are the server's, not ours
    for store in (from_env, from_url):
        await store.close()
    assert isinstance(open_object_store(str(tmp_path / "local")), LocalDirStore)
    for bad, says in [("s3://b/p?endpont=http://x", "unknown s3:// URL parameter 'endpont'"),
                      ("s3://key:secret@b/p", "takes no credentials"),
                      ("s3://b/p?path_style=maybe", "path_style"),
                      ("s3://b/p?timeout=soon", "timeout"),
                      ("gs://b/p", "s3:// URL")]:
        with pytest.raises(ValueError, match=says):
            open_object_store(bad)


@pytest.mark.kafka
async def test_a_gateway_tiers_to_s3_and_reads_it_back(redis_url: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`--tier-store s3://...` end to end: the segments land in the bucket, leave Redis, and Kafka
    clients read the topic whole from its first, remote, record and across the boundary."""
    from tests.conftest import kafka_bootstrap, running_gateway, test_config
    from tests.kafka_clients import consume, produce

    with S3Server(tmp_path / "s3") as server:
        for name, value in server.env.items():
            monkeypatch.setenv(name, value)
        cfg = test_config(redis_url, tier_store=f"s3://{server.bucket}/cluster-a", tier_interval=3600)
        async with running_gateway(cfg) as gw:
            bs, logs = kafka_bootstrap(gw), gw.services.log
            await logs.create_topic("cold", 1, {"remote.storage.enable": "true", "segment.bytes": "1048576",
                                                "local.retention.bytes": "0"})
            sent = [(b"k%d" % i, b"v" * 1000 + b"%d" % i) for i in range(2500)]
            await produce("confluent", bs, "cold", sent, **{"batch.num.messages": 50})
            assert gw.tiering is not None and await gw.tiering.tier_pass() > 2_000_000
            local_start, _ = await logs.tier_bounds("cold", 0)
            assert local_start >= 2000  # two segments of 1 MB left Redis
            listed = await s3_store(server, "cluster-a").list("")
            assert sum(o.size for o in listed) > 2_000_000
            for client in ("kafka-python", "confluent"):
                got = await consume(client, bs, "cold", 0, 0, len(sent))
                assert [(s[1], s[2], s[3]) for s in got[:len(sent)]] == [(i, k, v) for i, (k, v) in enumerate(sent)]
            across = await consume("kafka-python", bs, "cold", 0, local_start - 2, 4)
            assert [s[1] for s in across[:4]] == list(range(local_start - 2, local_start + 2))
