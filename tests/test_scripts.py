"""Every Lua script's header against its code, and the loader's include handling."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.store.scripts import LUA_DIR, ScriptError, all_specs, resolve


@pytest.mark.parametrize("name", sorted(all_specs()))
def test_header_matches_code(name):
    spec = all_specs()[name]
    body = spec.source.split("]]", 1)[1]
    used_keys = {int(i) for i in re.findall(r"KEYS\[(\d+)\]", body)}
    used_args = {int(i) for i in re.findall(r"ARGV\[(\d+)\]", body)}
    assert len(spec.keys) == spec.numkeys, f"{name}: the header lists {spec.keys}, the name says {spec.numkeys}"
    assert used_keys <= set(range(1, spec.numkeys + 1)), f"{name} uses undocumented KEYS {used_keys}"
    assert used_args == set(range(1, len(spec.argv) + 1)), f"{name}: ARGV used {used_args}, documented {spec.argv}"
    assert "local rcall = redis.call" in body
    assert "Returns" in spec.source.split("]]", 1)[0]


def test_include_cycles_are_refused(tmp_path: Path):
    (tmp_path / "includes").mkdir()
    (tmp_path / "includes" / "a.lua").write_text('--- @include "b"\n')
    (tmp_path / "includes" / "b.lua").write_text('--- @include "a"\n')
    (tmp_path / "top-1.lua").write_text('--- @include "a"\n')
    with pytest.raises(ScriptError, match="cycle"):
        resolve("top-1", tmp_path)


def test_includes_are_inlined():
    assert "local function entry_at" in resolve("append-5", LUA_DIR)
    assert "@include" not in resolve("append-5", LUA_DIR)
