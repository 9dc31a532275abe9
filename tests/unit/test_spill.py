"""SpillBuffer does what a bytearray does for every operation an open file's buffer needs,
with the bytes in a temporary file; what it cannot do cheaply it refuses."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfs.memory.spill import SpillBuffer

ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 3000), st.binary(min_size=0, max_size=700)),
        st.tuples(st.just("extend"), st.binary(max_size=900)),
        st.tuples(st.just("cut"), st.integers(0, 3000)),
        st.tuples(st.just("grow"), st.integers(0, 4000)),
        st.tuples(st.just("tail"), st.integers(0, 3000), st.binary(max_size=300)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(start=st.binary(max_size=2000), steps=ops)
def test_spill_buffer_matches_a_bytearray(tmp_path_factory, start, steps):
    """The writes, cuts, holes and reads of Buffers.write / resize, on both."""
    want = bytearray(start)
    got = SpillBuffer(tmp_path_factory.getbasetemp(), start)
    for step in steps:
        if step[0] == "write":  # Buffers.write: a hole first, then an overwrite
            _, off, buf = step
            for b in (want, got):
                if off > len(b):
                    if isinstance(b, SpillBuffer):
                        b.resize(off)
                    else:
                        b.extend(bytes(off - len(b)))
                b[off : off + len(buf)] = buf
        elif step[0] == "extend":
            want.extend(step[1])
            got.extend(step[1])
        elif step[0] == "cut":
            n = min(step[1], len(want))
            del want[n:]
            del got[n:]
        elif step[0] == "grow":
            n = max(step[1], len(want))
            want.extend(bytes(n - len(want)))
            got.resize(n)
        else:  # a write that replaces the tail (bytearray semantics)
            _, off, buf = step
            off = min(off, len(want))
            want[off:] = buf
            got[off:] = buf
        assert len(got) == len(want)
    assert bytes(got) == bytes(want)
    assert got == want
    for lo, hi in [(0, 10), (5, 5000), (len(want) - 3, len(want) + 9), (-4, None)]:
        assert got[lo:hi] == bytes(want[lo:hi])
    if want:
        assert got[0] == want[0] and got[-1] == want[-1]
    copy = got.copy()
    got.extend(b"more")
    assert bytes(copy) == bytes(want)


def test_spill_buffer_has_no_name_and_leaves_nothing(tmp_path):
    buf = SpillBuffer(tmp_path, b"x" * 5000)
    assert os.listdir(tmp_path) == []
    fd = buf._fd
    del buf
    with pytest.raises(OSError):
        os.fstat(fd)


def test_what_a_spill_buffer_cannot_do_cheaply_is_refused(tmp_path):
    buf = SpillBuffer(tmp_path, b"abcdef")
    with pytest.raises(TypeError):
        bytearray(buf)  # would read it byte by byte
    with pytest.raises(TypeError):
        buf[1:3] = b"longer"  # a length change inside the file
    with pytest.raises(TypeError):
        del buf[1:3]
    with pytest.raises(TypeError):
        memoryview(buf)  # type: ignore[call-overload]
    assert bytes(buf) == b"abcdef"
