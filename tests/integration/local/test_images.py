"""Image stand-ins hold exactly what their recipe says: built from this interpreter, with the
standard library, pip and the recipe's distributions, and nothing of the dev or agent
environments (tether_local.hosts.images)."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.paths import ROOT
from tether_local.hosts import images
from tether_local.hosts.images import PYTORCH_HF, ImageError, Recipe, StandIn, stand_in

# Installed here (the dev venv, and the agent's venv) but in no image.
NOT_IN_ANY_IMAGE = ("boto3", "httpx", "pydantic", "watchdog", "yaml", "tether_agent", "pytest")


def _inside(image: StandIn, code: str) -> object:
    done = subprocess.run(
        [str(image.python), "-I", "-c", code],
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def _distributions(image: StandIn) -> object:
    return _inside(
        image,
        "import json, importlib.metadata as m; "
        "print(json.dumps(sorted(d.metadata['Name'].lower() for d in m.distributions())))",
    )


def _importable(image: StandIn, modules: tuple[str, ...]) -> object:
    return _inside(
        image,
        "import json, importlib.util as u; "
        f"print(json.dumps({{m: u.find_spec(m) is not None for m in {list(modules)!r}}}))",
    )


def test_python_slim_holds_the_standard_library_and_pip_only() -> None:
    image = stand_in("python:3.12-slim")
    assert _distributions(image) == ["pip"]
    assert _importable(image, ("json", "venv", "numpy", *NOT_IN_ANY_IMAGE)) == {
        "json": True,
        "venv": True,
        "numpy": False,
        **dict.fromkeys(NOT_IN_ANY_IMAGE, False),
    }
    assert _inside(image, "import json, sys; print(json.dumps(sys.prefix))") == str(image.root)


@pytest.mark.parametrize("image", ["python:3.11-slim", "python:3.12-slim", "python:3.13"])
def test_every_python_slim_tag_shares_one_stand_in(image: str) -> None:
    assert stand_in(image).root == stand_in("python:3.12-slim").root


def test_a_recipes_distributions_are_this_interpreters_linked_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PyYAML (no dependencies) linked from here, file by file: no package index needed."""
    linked = Recipe("linked-yaml", "linked:1", distributions=("PyYAML",))
    monkeypatch.setattr(images, "CATALOGUE", ((re.compile("^linked:1$"), linked),))
    image = stand_in("linked:1")
    assert _distributions(image) == ["pip", "pyyaml"]
    assert _inside(image, "import json, yaml; print(json.dumps(yaml.__version__))") == (
        importlib.metadata.version("PyYAML")
    )
    origin = _inside(
        image, "import json, importlib.util as u; print(json.dumps(u.find_spec('yaml').origin))"
    )
    assert Path(str(origin)).is_symlink() and Path(str(origin)).is_relative_to(image.root)


def test_a_recipe_missing_a_dependency_of_what_it_installs_does_not_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """httpx needs httpcore (among others): a recipe that links httpx alone fails its
    `pip check` instead of running with a borrowed httpcore."""
    incomplete = Recipe("incomplete-httpx", "incomplete:1", distributions=("httpx",))
    monkeypatch.setattr(images, "CATALOGUE", ((re.compile("^incomplete:1$"), incomplete),))
    with pytest.raises(ImageError, match="pip check") as refused:
        stand_in("incomplete:1")
    assert "httpcore" in str(refused.value)
    assert not list(images.IMAGES.glob("incomplete-httpx-*"))  # nothing half-built left


def test_the_pytorch_image_holds_torch_and_the_example_requirements_satisfied_offline() -> None:
    """The qlora-7b example's image: this interpreter's torch and the Hugging Face stack, so
    the job's own `pip install -r requirements.txt` finds every pin satisfied with no index."""
    image = stand_in("pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime")
    assert image.recipe == PYTORCH_HF
    names = _distributions(image)
    assert isinstance(names, list)
    assert {
        "torch", "transformers", "peft", "accelerate", "bitsandbytes", "safetensors", "lightning"
    } <= set(names)  # fmt: skip
    assert _importable(image, ("torch", "peft", "boto3", "tether_agent", "pytest", "moto")) == {
        "torch": True,
        "peft": True,
        "boto3": False,
        "tether_agent": False,
        "pytest": False,
        "moto": False,
    }
    requirements = ROOT / "examples" / "qlora-7b" / "requirements.txt"
    pip = [str(image.python), "-m", "pip", "--disable-pip-version-check", "--isolated"]
    done = subprocess.run(
        [*pip, "install", "--no-index", "-r", str(requirements)],
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Successfully installed" not in done.stdout


def test_the_pytorch_image_has_torchrun_on_its_path_for_its_own_interpreter() -> None:
    """A real PyTorch image has pip's console scripts (`torchrun`) in its bin: a job's
    `torchrun --nproc_per_node=2 train.py` finds it first on PATH and runs the image's torch."""
    image = stand_in("pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime")
    torchrun = image.bin / "torchrun"
    assert torchrun.read_text().splitlines()[0] == f"#!{image.python}"
    done = subprocess.run(
        ["torchrun", "--help"],
        env={"PATH": f"{image.bin}:/usr/bin:/bin", "HOME": "/nonexistent"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "--nproc-per-node" in done.stdout or "--nproc_per_node" in done.stdout


def test_a_recipe_whose_extra_is_not_installed_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing = Recipe(
        "needs-hf", "needs-hf:1", distributions=("no-such-distribution-xyz",), extra="hf"
    )
    monkeypatch.setattr(images, "CATALOGUE", ((re.compile("^needs-hf:1$"), missing),))
    with pytest.raises(ImageError) as refused:
        stand_in("needs-hf:1")
    assert "'no-such-distribution-xyz'" in str(refused.value)
    assert "pip install 'tether[hf]'" in str(refused.value)
