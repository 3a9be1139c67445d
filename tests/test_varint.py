"""The one varint implementation: golden bytes from protobuf, round trips, and refusals."""

from __future__ import annotations

import pytest
from google.protobuf.internal.encoder import _VarintBytes  # type: ignore[attr-defined]
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import CorruptMessage
from gateway.formats.varint import (
    VarintError,
    read_uvarint,
    read_varint,
    uvarint,
    write_uvarint,
    write_varint,
)

INT64 = st.integers(-(2**63), 2**63 - 1)


@given(st.integers(0, 2**64 - 1))
def test_unsigned_bytes_are_protobufs(n: int) -> None:
    out = bytearray()
    write_uvarint(out, n)
    assert bytes(out) == uvarint(n) == _VarintBytes(n)
    assert read_uvarint(out, 0) == (n, len(out))


@given(INT64)
def test_negative_goes_as_its_64_bit_twos_complement(n: int) -> None:
    assert uvarint(n) == _VarintBytes(n % 2**64)


@pytest.mark.parametrize(
    ("value", "golden"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (-64, b"\x7f"), (64, b"\x80\x01"),
     (8191, b"\xfe\x7f"), (-8192, b"\xff\x7f"), (8192, b"\x80\x80\x01"),
     (2**63 - 1, b"\xfe" + b"\xff" * 8 + b"\x01"), (-(2**63), b"\xff" * 9 + b"\x01")],
)
def test_zigzag_golden(value: int, golden: bytes) -> None:
    out = bytearray(b"x")
    write_varint(out, value)
    assert bytes(out) == b"x" + golden
    assert read_varint(bytes(out), 1) == (value, len(out))


@given(INT64, st.binary(max_size=4))
def test_zigzag_round_trip_reads_only_its_bytes(value: int, tail: bytes) -> None:
    out = bytearray()
    write_varint(out, value)
    end = len(out)
    out += tail
    assert read_varint(memoryview(out), 0) == (value, end)


@pytest.mark.parametrize("buf", [b"", b"\x80", b"\xff\xff", b"\xff" * 10 + b"\x01"])
def test_truncated_or_overlong_is_refused(buf: bytes) -> None:
    with pytest.raises(VarintError):
        read_uvarint(buf, 0)
    with pytest.raises(CorruptMessage):  # a corrupt record where records are read
        read_varint(buf, 0)
