"""examples/qlora-7b holds together: its requirements pin what tether's tests run (the `[hf]`
extra), its spec ships its own folder as the job's code, asks for HF_TOKEN as a secret, keeps
its result outside the checkpoints, and names an image the local stack stands in for."""

from __future__ import annotations

import tomllib

import yaml

from tests.paths import EXAMPLES, ROOT
from tether_local.hosts.images import PYTORCH_HF, recipe_for

EXAMPLE = EXAMPLES / "qlora-7b"


def _pins(lines: list[str]) -> dict[str, str]:
    pins = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"not pinned exactly: {line!r}"
            pins[name.strip().lower()] = version.strip()
    return pins


def test_the_requirements_pin_what_the_hf_extra_installs_but_torch_and_lightning() -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    hf = _pins(extra["hf"])
    required = _pins((EXAMPLE / "requirements.txt").read_text().splitlines())
    assert hf.pop("torch") == "2.13.0"  # the image brings its own torch: not a requirement
    assert hf.pop("lightning") == "2.6.6"  # for Lightning scripts' tests, not the QLoRA example
    assert required == hf
    assert set(required) == {"transformers", "peft", "accelerate", "bitsandbytes"}


def test_the_spec_ships_its_folder_asks_for_the_token_and_keeps_the_adapter() -> None:
    spec = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    assert spec["code"] == {"dir": "."}
    assert spec["run"].startswith("pip install -q -r requirements.txt && python train.py ")
    assert spec["secrets"] == ["HF_TOKEN"]
    assert "HF_TOKEN" not in spec.get("env", {})
    assert spec["outputs"] == {"dir": "/workspace/outputs"}
    assert spec["checkpoint"]["dir"] == "/workspace/checkpoints"
    assert recipe_for(spec["image"]) == PYTORCH_HF
    assert (EXAMPLE / "train.py").is_file()
