"""`tether validate` applies every code limit `tether submit` applies (`code_pack.check`, the
walk and compression `pack` uses): a working directory whose archive would pass
`MAX_ARCHIVE_BYTES` compressed is refused by validate, naming the limit, as submit refuses it;
one that is big but compresses under it (a sparse file: zeros) passes both."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from functions.domain.code_archive import MAX_ARCHIVE_BYTES
from tether_cli import code_pack
from tether_cli.main import main

MIB = 1024 * 1024
TRAIN = "print('train')\n"
SPEC = """\
name: big-code
image: python:3.12-slim
code:
  dir: code
run: python train.py
resources:
  gpu_count: 1
expected_hours: 1
checkpoint:
  dir: /workspace/checkpoints
budget_usd: 5
"""


def spec_with_code(tmp_path: Path) -> tuple[Path, Path]:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    return spec, code


def write_incompressible(path: Path, size_bytes: int) -> None:
    """Bytes no compressor shrinks (seeded, so every run writes the same file)."""
    rng = random.Random(7)
    with path.open("wb") as out:
        for _ in range(size_bytes // MIB):
            out.write(rng.randbytes(MIB))


def test_validate_refuses_a_folder_whose_archive_passes_the_compressed_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if shutil.disk_usage(tmp_path).free < 400 * MIB:
        pytest.skip("needs ~110 MiB of scratch disk")
    spec, code = spec_with_code(tmp_path)
    write_incompressible(code / "weights.bin", 101 * MIB)

    status = main(["validate", str(spec)])

    out, err = capsys.readouterr()
    assert status == 2, out
    assert "OK" not in out
    assert "passes 100.0 MiB compressed" in err  # the limit, named
    assert "weights.bin" in err  # the biggest file, to add to .tetherignore
    # submit's packing refuses the same folder with the same words
    with pytest.raises(code_pack.PackError, match=r"passes 100\.0 MiB compressed"):
        code_pack.pack(code, out_dir=tmp_path)


def test_a_big_folder_that_compresses_under_the_limit_passes_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, code = spec_with_code(tmp_path)
    with (code / "zeros.bin").open("wb") as sparse:
        os.truncate(sparse.fileno(), 150 * MIB)  # 150 MiB of zeros, no disk used

    status = main(["validate", str(spec)])

    out, _ = capsys.readouterr()
    assert status == 0
    assert out.startswith(f"OK {spec}")
    assert f"would ship 2 files, {150 * MIB + len(TRAIN)} bytes before compression" in out


def test_a_small_folder_is_not_compressed_to_be_checked(tmp_path: Path) -> None:
    _, code = spec_with_code(tmp_path)
    tree = code_pack.collect(code)
    assert code_pack.archive_bound(tree) < MAX_ARCHIVE_BYTES


def test_the_bound_holds_for_incompressible_bytes(tmp_path: Path) -> None:
    _, code = spec_with_code(tmp_path)
    write_incompressible(code / "noise.bin", 2 * MIB)
    (code / ("n" * 200)).write_text("a long name takes a record of its own\n")
    packed = code_pack.pack(code, out_dir=tmp_path)
    try:
        assert packed.size_bytes <= code_pack.archive_bound(packed.tree)
    finally:
        code_pack.cleanup(packed)
