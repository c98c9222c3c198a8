"""A restored range reaches its file in writes of at most 32 KiB (`ranged_download.write_at`),
as s5cmd's: on the development VM larger writes into new page-cache pages cost the kernel
several times the CPU (BENCHMARKS.md, "Agent transfer"). Counted with the kernel's own count
of this thread's write system calls."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tether_agent.ranged_download import write_at

THREAD_IO = Path("/proc/thread-self/io")


def write_calls() -> int:
    fields = dict(line.split(": ") for line in THREAD_IO.read_text().splitlines())
    return int(fields["syscw"])


@pytest.mark.skipif(not THREAD_IO.exists(), reason="Linux only: /proc/thread-self/io")
@pytest.mark.parametrize(
    ("size", "offset", "expected_writes"),
    [
        (1024 * 1024, 0, 32),
        (32 * 1024, 4096, 1),
        (32 * 1024 + 1, 0, 2),
        (64 * 1024, 0, 2),
        (100, 7, 1),
    ],
)
def test_bytes_land_at_their_offset_in_writes_of_at_most_32_kib(
    tmp_path: Path, size: int, offset: int, expected_writes: int
) -> None:
    data = bytes(i % 251 for i in range(size))
    fd = os.open(tmp_path / "range.bin", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        before = write_calls()
        write_at(fd, memoryview(data), offset)
        calls = write_calls() - before
    finally:
        os.close(fd)
    assert calls == expected_writes
    assert (tmp_path / "range.bin").read_bytes() == bytes(offset) + data
