"""Stand-ins for container images: what a job's `image` gives its training command locally.

On a rented host the training command runs in a container of the job's image: `python` is the
image's interpreter with the image's packages and nothing of the agent's venv. The local stack
has no container runtime, so each image it can run has a recipe in `CATALOGUE`, and the recipe
builds a stand-in environment once: a venv under `build/local-images/<hash>/`, shared by every
host, stack and test worker (built under a lock, like the agent's venv in
`tether_local.hosts.local_hosts`).

- `python:3.N`, `python:3.N-slim` (also `3.N.P`, `-bookworm`, …): a fresh venv of THIS machine's
  interpreter, with the standard library and pip only (setuptools removed, as in python:3.12+
  images). The Python version is this machine's, whatever N says.
- `pytorch/pytorch:2.N.P-cudaX.Y-cudnnZ-runtime` (`examples/qlora-7b/job.yaml`): THIS
  interpreter's torch (a CPU build, whatever version the tag says) and the Hugging Face stack
  the example's `pip install -r requirements.txt` puts on top of the image (transformers, peft,
  accelerate, bitsandbytes), and PyTorch Lightning (for scripts written for it: the auto hooks'
  tests), with every dependency of theirs: the local stack has no package index, so the
  stand-in holds them already and that pip run finds each pin satisfied. They come from the
  `[hf]` install extra.

How a recipe fills the stand-in, offline:
- each distribution it names is linked in from this interpreter's site-packages file by file:
  exactly the files its RECORD lists inside site-packages; its console scripts (`torchrun`,
  `accelerate`) are written into the stand-in's bin for its own interpreter, as pip writes
  them, so a job's `torchrun --nproc_per_node=2 train.py` runs as in the image;
- each local project is built into a wheel (cached under `build/local-images/wheels/`, by source
  hash; building needs the package index once for setuptools, as the agent wheel does) and
  installed with pip `--no-deps --no-index`;
- `pip check` must then pass inside the stand-in, so a recipe that forgets a dependency of what
  it installs fails to build instead of running with something borrowed.

An image with no recipe raises `UnknownImage`: its message names the image and the known ones,
and the local host fails its start with it, as Vast does for an image it cannot pull.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from infra.synth import BUILD, source_hash

IMAGES = BUILD / "local-images"
_PURELIB = "import sysconfig; print(sysconfig.get_path('purelib'))"
_FORMAT = 2  # bump to rebuild every cached stand-in after a change to how they are built


class ImageError(RuntimeError):
    """The image cannot stand in locally (unknown, or its stand-in failed to build)."""


class UnknownImage(ImageError, LookupError):
    """No recipe for this image name."""


@dataclass(frozen=True)
class Recipe:
    """What an image holds besides the standard library and pip."""

    name: str  # the catalogue's name for it, e.g. "python-slim"
    matches: str  # the image names it stands in for, as people write them
    distributions: tuple[str, ...] = ()  # linked from this interpreter's site-packages
    projects: tuple[Path, ...] = ()  # local projects installed from their wheels
    with_dependencies: bool = False  # also link what `distributions` need, recursively
    extra: str = "local"  # the install extra of tether that brings `distributions`


@dataclass(frozen=True)
class StandIn:
    """A built stand-in: `bin` goes first on the host's PATH (`python`, `python3`, `pip`)."""

    image: str
    recipe: Recipe
    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"


PYTHON_SLIM = Recipe("python-slim", "python:3.N[.P][-slim][-<debian release>]")
PYTORCH_HF = Recipe(
    "pytorch-hf",
    "pytorch/pytorch:2.N.P-cudaX.Y-cudnnZ-runtime",
    distributions=("torch", "transformers", "peft", "accelerate", "bitsandbytes", "lightning"),
    with_dependencies=True,
    extra="hf",
)
CATALOGUE: tuple[tuple[re.Pattern[str], Recipe], ...] = (
    (
        re.compile(
            r"^(?:docker\.io/)?(?:library/)?python:3\.\d+(?:\.\d+)?"
            r"(?:-slim)?(?:-(?:bookworm|bullseye|trixie))?$"
        ),
        PYTHON_SLIM,
    ),
    (
        re.compile(r"^(?:docker\.io/)?pytorch/pytorch:2\.\d+\.\d+-cuda\d+\.\d+-cudnn\d+-runtime$"),
        PYTORCH_HF,
    ),
)


def known_images() -> list[str]:
    return [recipe.matches for _, recipe in CATALOGUE]


def recipe_for(image: str) -> Recipe:
    """The recipe standing in for `image`; UnknownImage (naming the known ones) otherwise."""
    for pattern, recipe in CATALOGUE:
        if pattern.match(image):
            return recipe
    raise UnknownImage(
        f"image {image!r} cannot be pulled: the local stack has no stand-in for it "
        f"(known: {', '.join(known_images())}; see tether_local/hosts/images.py)"
    )


def stand_in(image: str) -> StandIn:
    """The stand-in environment for `image`, built on first use and cached under build/."""
    recipe = recipe_for(image)
    target = IMAGES / f"{recipe.name}-{_recipe_hash(recipe)}"
    if not (target / ".complete").exists():
        IMAGES.mkdir(parents=True, exist_ok=True)
        with (IMAGES / ".lock").open("w") as lock:  # xdist workers and stacks build it once
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (target / ".complete").exists():
                try:
                    _build(recipe, target)
                except BaseException:
                    shutil.rmtree(target, ignore_errors=True)
                    raise
    return StandIn(image, recipe, target)


# --- building ---------------------------------------------------------------------------------


def _recipe_hash(recipe: Recipe) -> str:
    facts = {
        "format": _FORMAT,
        "python": sys.version,
        "base": getattr(sys, "_base_executable", sys.executable),
        "distributions": [
            (name, _distribution(name, recipe.extra).version) for name in _linked(recipe)
        ],
        "projects": [source_hash(project) for project in recipe.projects],
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def _build(recipe: Recipe, target: Path) -> None:
    """Built in place (a venv's scripts name its absolute path), under the caller's lock."""
    shutil.rmtree(target, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(target)], f"creating the {recipe.name} venv")
    python = target / "bin" / "python"
    # -I: neither PYTHONPATH nor the working directory (a clone's root holds `tether.egg-info`
    # after `pip install .`) may add distributions that `pip check` then finds unmet.
    pip = [str(python), "-I", "-m", "pip", "--disable-pip-version-check", "--no-input"]
    _run([*pip, "uninstall", "--yes", "--quiet", "setuptools", "wheel"], "removing setuptools")
    site = Path(_output([str(python), "-c", _PURELIB]))
    for name in _linked(recipe):
        _link_distribution(name, site, recipe.extra)
        _write_console_scripts(name, python, recipe.extra)
    for project in recipe.projects:
        _run(
            [*pip, "install", "--quiet", "--no-deps", "--no-index", str(_project_wheel(project))],
            f"installing {project.name}",
        )
    _run([*pip, "check"], f"`pip check` in the {recipe.name} stand-in")
    (target / ".complete").write_text(recipe.matches + "\n")


def _distribution(name: str, extra: str = "local") -> importlib.metadata.Distribution:
    try:
        return importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        raise ImageError(
            f"the image stand-ins need {name!r} installed in this interpreter "
            f"(pip install 'tether[{extra}]')"
        ) from None


def _linked(recipe: Recipe) -> list[str]:
    """The distributions a recipe links: its own, and with `with_dependencies` everything they
    require (markers evaluated for this interpreter, no extras), as installed here."""
    if not recipe.with_dependencies:
        return list(recipe.distributions)
    from packaging.requirements import Requirement  # a dependency of what such recipes link
    from packaging.utils import canonicalize_name

    found: dict[str, str] = {}
    todo = list(recipe.distributions)
    while todo:
        name = todo.pop()
        key = canonicalize_name(name)
        if key in found:
            continue
        dist = _distribution(name, recipe.extra)
        found[key] = dist.metadata["Name"]
        for spec in dist.requires or ():
            requirement = Requirement(spec)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return sorted(found.values(), key=canonicalize_name)


def _link_distribution(name: str, site: Path, extra: str) -> None:
    """Every file the distribution installed into site-packages, symlinked into `site`."""
    dist = _distribution(name, extra)
    base = Path(str(dist.locate_file(""))).resolve()
    if dist.files is None:
        raise ImageError(f"{name}: no RECORD, cannot tell which files it installed")
    for entry in dist.files:
        source = Path(str(dist.locate_file(entry))).resolve()
        if not source.is_relative_to(base) or not source.is_file():
            continue  # scripts in bin/, data outside site-packages
        dest = site / source.relative_to(base)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not dest.exists():
            dest.symlink_to(source)


def _write_console_scripts(name: str, python: Path, extra: str) -> None:
    """The distribution's `console_scripts` entry points as executables next to `python`,
    in the form pip gives them (the module imported, its function's return the exit status)."""
    for entry in _distribution(name, extra).entry_points:
        if entry.group != "console_scripts" or not re.fullmatch(r"[\w.-]+", entry.name):
            continue
        module, _, function = entry.value.partition(":")
        function = function.split("[")[0].strip()
        script = python.parent / entry.name
        if not function or script.exists():
            continue
        script.write_text(
            f"#!{python}\n"
            "import sys\n"
            f"from {module} import {function.split('.')[0]}\n"
            "if __name__ == '__main__':\n"
            f"    sys.exit({function}())\n"
        )
        script.chmod(0o755)


def _project_wheel(project: Path) -> Path:
    """The project's wheel, built once per source hash (from a copy: setuptools writes build/
    and *.egg-info next to the sources)."""
    out = IMAGES / "wheels" / f"{project.name}-{source_hash(project)}"
    wheels = sorted(out.glob("*.whl"))
    if wheels:
        return wheels[-1]
    with tempfile.TemporaryDirectory(prefix="tether-image-") as tmp:
        source = Path(tmp) / project.name
        shutil.copytree(project, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
        staging = Path(tmp) / "wheel"
        _run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
             "--disable-pip-version-check", "--wheel-dir", str(staging), str(source)],
            f"building the {project.name} wheel",
        )  # fmt: skip
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(staging, out)
    return sorted(out.glob("*.whl"))[-1]


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise ImageError(f"{what} failed (exit {done.returncode}):\n{tail}")


def _output(cmd: list[str]) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


__all__ = [
    "CATALOGUE",
    "PYTHON_SLIM",
    "PYTORCH_HF",
    "ImageError",
    "Recipe",
    "StandIn",
    "UnknownImage",
    "known_images",
    "recipe_for",
    "stand_in",
]
