"""`torch_archive.content_digest`: a `torch.save` file compared by the values it holds, so a
resumed run that ends with the same tensors and numbers compares equal, though pickle wrote
some strings again that the uninterrupted run referred back to; anything that differs still
differs, and nothing in the file runs."""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tether_local.demo.torch_archive import content_digest

torch = pytest.importorskip("torch")


def _train(model: Any, optimizer: Any, steps: range) -> None:
    for step in steps:
        torch.manual_seed(step)  # each step's batch, whatever ran before it
        x = torch.randn(8, 4)
        loss = ((model(x) - x.sum(dim=1, keepdim=True)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def _fresh() -> tuple[Any, Any]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def _save(path: Path, step: int, model: Any, optimizer: Any) -> Path:
    # PyTorch's documented general checkpoint, with a top-level "step" as Adam's state has
    torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()},
               path)  # fmt: skip
    return path


def test_a_resumed_adam_run_saves_other_bytes_but_the_same_values(tmp_path: Path) -> None:
    model, optimizer = _fresh()
    _train(model, optimizer, range(3))
    halfway = _save(tmp_path / "step-3.pt", 3, model, optimizer)
    _train(model, optimizer, range(3, 6))
    (tmp_path / "a").mkdir()
    uninterrupted = _save(tmp_path / "a" / "step-6.pt", 6, model, optimizer)

    model, optimizer = _fresh()  # a new host: everything from the restored checkpoint
    restored = torch.load(halfway, weights_only=True)
    model.load_state_dict(restored["model"])
    optimizer.load_state_dict(restored["optimizer"])
    _train(model, optimizer, range(restored["step"], 6))
    (tmp_path / "b").mkdir()
    resumed = _save(tmp_path / "b" / "step-6.pt", 6, model, optimizer)

    assert uninterrupted.read_bytes() != resumed.read_bytes()  # pickle's sharing differs
    assert content_digest(uninterrupted) == content_digest(resumed) is not None


def test_a_changed_weight_or_number_is_a_different_digest(tmp_path: Path) -> None:
    model, optimizer = _fresh()
    base = content_digest(_save(tmp_path / "base.pt", 6, model, optimizer))
    other_step = content_digest(_save(tmp_path / "step.pt", 7, model, optimizer))
    with torch.no_grad():
        model.weight[0, 0] += 1e-6
    other_weight = content_digest(_save(tmp_path / "weight.pt", 6, model, optimizer))
    assert base is not None
    assert len({base, other_step, other_weight}) == 3


def test_files_that_are_not_torch_archives_have_no_values_digest(tmp_path: Path) -> None:
    plain = tmp_path / "state.json"
    plain.write_text("{}")
    other_zip = tmp_path / "other.zip"
    with zipfile.ZipFile(other_zip, "w") as archive:
        archive.writestr("x/readme.txt", "no pickle here")
    assert content_digest(plain) is None
    assert content_digest(other_zip) is None


class _Payload:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("touch pwned",))


def test_nothing_a_file_names_is_imported_or_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hostile host's checkpoint: its pickle calls os.system when torch.load-ed unsafely;
    here the call is only recorded."""
    monkeypatch.chdir(tmp_path)
    hostile = tmp_path / "ckpt.pt"
    with zipfile.ZipFile(hostile, "w") as archive:
        archive.writestr("ckpt/data.pkl", pickle.dumps({"model": _Payload()}, protocol=2))
    assert content_digest(hostile) is not None
    assert not (tmp_path / "pwned").exists()
    buffer = io.BytesIO()
    torch.save({"a": 1}, buffer)  # the reader takes torch's own layout too
    (tmp_path / "torch.pt").write_bytes(buffer.getvalue())
    assert content_digest(tmp_path / "torch.pt") is not None


def test_a_structure_too_deep_to_read_falls_back_to_the_bytes(tmp_path: Path) -> None:
    depth = 5000  # lists in lists: pickle reads it without recursion, the digest would recurse
    nested = b"\x80\x02" + pickle.EMPTY_LIST * depth + pickle.APPEND * (depth - 1) + pickle.STOP
    deep = tmp_path / "deep.pt"
    with zipfile.ZipFile(deep, "w") as archive:
        archive.writestr("deep/data.pkl", nested)
    assert content_digest(deep) is None
