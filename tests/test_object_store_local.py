"""The local-directory object store that tiered segments are written to by default: whole objects
or none, ranged reads, idempotent deletes, listing by prefix, and a directory that goes away
reported as the store being away (retriable), never silently recreated."""

from __future__ import annotations

import os

import pytest

from gateway.store.objects import ObjectNotFound, ObjectStoreUnavailable
from gateway.store.objects.local import LocalDirStore
from gateway.store.objects.open import open_object_store


async def test_objects_round_trip_whole_and_by_range(tmp_path):
    store = LocalDirStore(tmp_path / "tier")
    data = bytes(range(256)) * 40
    await store.put("topic-a/0/00000000000000000000.seg", data)
    assert await store.get("topic-a/0/00000000000000000000.seg") == data
    assert await store.get_range("topic-a/0/00000000000000000000.seg", 100, 50) == data[100:150]
    # A range running past the end gives what is there, as an HTTP ranged GET does.
    assert await store.get_range("topic-a/0/00000000000000000000.seg", len(data) - 10, 100) == data[-10:]
    assert await store.get_range("topic-a/0/00000000000000000000.seg", len(data), 5) == b""
    await store.put("topic-a/0/00000000000000000000.seg", b"replaced")
    assert await store.get("topic-a/0/00000000000000000000.seg") == b"replaced"


async def test_absent_objects_and_deletes(tmp_path):
    store = LocalDirStore(tmp_path)
    with pytest.raises(ObjectNotFound):
        await store.get("t/0/missing")
    with pytest.raises(ObjectNotFound):
        await store.get_range("t/0/missing", 0, 1)
    await store.put("t/0/a", b"x")
    await store.delete("t/0/a")
    await store.delete("t/0/a")  # already gone: not an error
    assert await store.list("") == []
    assert not (tmp_path / "t").exists(), "emptied key directories are pruned"


async def test_list_by_prefix_in_key_order_skipping_interrupted_writes(tmp_path):
    store = LocalDirStore(tmp_path)
    for key in ["b/2", "a/10", "a/1", "ab/1"]:
        await store.put(key, key.encode())
    # What a put SIGKILLed before its rename leaves behind.
    (tmp_path / "a" / ".tmp-0123").write_bytes(b"half")
    listed = await store.list("a/")
    assert [o.key for o in listed] == ["a/1", "a/10"]
    assert [o.size for o in listed] == [3, 4]
    assert [o.key for o in await store.list("")] == ["a/1", "a/10", "ab/1", "b/2"]
    assert not (tmp_path / "a" / ".tmp-0123").exists()


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a//b", "./a", "a/.tmp-x"])
async def test_keys_that_would_escape_or_collide_are_refused(tmp_path, key):
    store = LocalDirStore(tmp_path)
    with pytest.raises(ValueError):
        await store.put(key, b"x")


async def test_a_directory_gone_away_is_unavailable_until_it_returns(tmp_path):
    root = tmp_path / "tier"
    store = LocalDirStore(root)
    await store.put("t/0/s", b"kept")
    os.rename(root, tmp_path / "unmounted")
    for call in (store.put("t/0/n", b"x"), store.get("t/0/s"), store.get_range("t/0/s", 0, 1),
                 store.delete("t/0/s"), store.list("")):
        with pytest.raises(ObjectStoreUnavailable):
            await call
    assert not root.exists(), "the mount point is not recreated behind the volume's back"
    os.rename(tmp_path / "unmounted", root)
    assert await store.get("t/0/s") == b"kept"


async def test_a_setting_names_its_backend(tmp_path):
    assert open_object_store(str(tmp_path / "d")).description == f"directory {tmp_path / 'd'}"
    assert open_object_store(f"file://{tmp_path}/e").description == f"directory {tmp_path / 'e'}"
    with pytest.raises(ValueError, match="unsupported object store"):
        open_object_store("ftp://host/x")
