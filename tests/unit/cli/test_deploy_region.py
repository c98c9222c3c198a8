"""`tether deploy | destroy | secrets set`: one region, resolved once, named with its source, and
given to the CDK CLI under both names it may read (docs/deploy.md "One region")."""

from __future__ import annotations

import pytest

from tether_cli import deploy
from tether_cli.main import main
from tether_cli.output import CliError


def no_profile() -> str | None:
    return None


@pytest.mark.parametrize(
    ("given", "environ", "profile", "expected"),
    [
        ("ap-south-1", {"AWS_REGION": "eu-west-1"}, "us-east-2", ("ap-south-1", "--region")),
        (
            None,
            {"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-east-1"},
            "us-east-2",
            ("eu-west-1", "AWS_REGION"),
        ),
        (
            None,
            {"AWS_DEFAULT_REGION": "us-east-1"},
            "us-east-2",
            ("us-east-1", "AWS_DEFAULT_REGION"),
        ),
        (
            None,
            {"AWS_REGION": " "},
            "us-east-2",
            ("us-east-2", "profile default in the AWS config"),
        ),
        (
            None,
            {"AWS_PROFILE": "work"},
            "eu-central-1",
            ("eu-central-1", "profile work in the AWS config"),
        ),
    ],
)
def test_the_region_comes_from_the_flag_then_aws_region_then_aws_default_region_then_the_profile(
    given: str | None, environ: dict[str, str], profile: str, expected: tuple[str, str]
) -> None:
    assert deploy.resolve_region(given, environ, lambda: profile) == expected


def test_no_region_anywhere_is_a_usage_error_that_says_where_to_set_one() -> None:
    with pytest.raises(CliError, match="no AWS region: pass --region, set AWS_REGION") as caught:
        deploy.resolve_region(None, {}, no_profile)
    assert caught.value.exit_code == 2


def test_a_malformed_region_variable_is_named() -> None:
    with pytest.raises(CliError, match="AWS_DEFAULT_REGION: not an AWS region name") as caught:
        deploy.resolve_region(None, {"AWS_DEFAULT_REGION": "Frankfurt"}, no_profile)
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("command", [["deploy"], ["destroy"], ["secrets", "set", "vast"]])
def test_a_malformed_region_flag_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    assert main([*command, "--region", "eu_west_1"]) == 2
    assert (
        "--region: not an AWS region name (like eu-west-1): 'eu_west_1'" in capsys.readouterr().err
    )


def test_the_cdk_cli_gets_the_region_under_both_names() -> None:
    env = deploy.region_environment(
        "eu-west-1", {"AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-west-2", "HOME": "/h"}
    )
    assert env == {"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "eu-west-1", "HOME": "/h"}


def test_node_older_than_22_is_refused_with_the_version_found(tmp_path) -> None:
    for name, version in (("node", "v20.20.2"), ("npx", "10.8.2")):
        script = tmp_path / name
        script.write_text(f"#!/bin/sh\necho {version}\n")
        script.chmod(0o755)
    with pytest.raises(
        CliError, match=r"Node\.js 22\+ is needed for the CDK CLI \(found v20\.20\.2\)"
    ):
        deploy.check_node(which=lambda name: str(tmp_path / name))


def test_node_22_passes_and_gives_the_npx_to_run(tmp_path) -> None:
    for name in ("node", "npx"):
        script = tmp_path / name
        script.write_text("#!/bin/sh\necho v22.12.0\n")
        script.chmod(0o755)
    assert deploy.check_node(which=lambda name: str(tmp_path / name)) == str(tmp_path / "npx")
