"""The image catalogue: which names the local stack stands in for, and the refusal for the
rest (pure: no stand-in is built here)."""

from __future__ import annotations

import pytest

from tether_local.hosts.images import PYTHON_SLIM, PYTORCH_HF, UnknownImage, recipe_for


@pytest.mark.parametrize(
    ("image", "recipe"),
    [
        ("python:3.12-slim", PYTHON_SLIM),
        ("python:3.11", PYTHON_SLIM),
        ("python:3.12.7-slim-bookworm", PYTHON_SLIM),
        ("docker.io/library/python:3.13-slim", PYTHON_SLIM),
        ("pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime", PYTORCH_HF),  # examples/qlora-7b
        ("pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime", PYTORCH_HF),
        ("docker.io/pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime", PYTORCH_HF),
    ],
)
def test_known_images_have_a_recipe(image: str, recipe: object) -> None:
    assert recipe_for(image) == recipe


@pytest.mark.parametrize(
    "image",
    [
        "pytorch/pytorch:2.6.0-cuda12.4-cudnn9-devel",  # not the runtime the recipe is
        "pytorch/pytorch:latest",
        "nvidia/cuda:12.4.1-runtime-ubuntu22.04",
        "python:latest",
        "python:3.12-alpine",
        "python:2.7-slim",
        "tether-examples/tiny-cpu:0.1.0",  # the demo's old image: it runs on python:3.12-slim now
        "evil/python:3.12-slim",
    ],
)
def test_other_images_are_refused_naming_the_image_and_the_known_ones(image: str) -> None:
    with pytest.raises(UnknownImage) as refused:
        recipe_for(image)
    message = str(refused.value)
    assert f"image {image!r} cannot be pulled" in message
    assert "python:3.N[.P][-slim]" in message
    assert "pytorch/pytorch:2.N.P-cudaX.Y-cudnnZ-runtime" in message


def test_the_recipes_say_what_their_images_carry() -> None:
    assert PYTHON_SLIM.distributions == () and PYTHON_SLIM.projects == ()
    assert PYTORCH_HF.distributions == (
        "torch", "transformers", "peft", "accelerate", "bitsandbytes", "lightning"
    )  # fmt: skip
    assert PYTORCH_HF.with_dependencies and PYTORCH_HF.extra == "hf"
