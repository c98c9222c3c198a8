"""Every function runs with Powertools' response and error capture off, whatever its construct
passes: a presigned URL or secret a handler returns never reaches X-Ray (the code decides the
same in functions/observability.py; this holds a Tracer built anywhere else to it)."""

from __future__ import annotations

from infra import names
from tests.infra.conftest import resources


def test_every_function_turns_off_response_and_error_capture(template):
    functions = resources(template, "AWS::Lambda::Function")
    assert functions
    for name, function in functions.items():
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        if "POWERTOOLS_SERVICE_NAME" not in variables:
            continue  # a CDK-provided helper function, not one of ours
        assert variables.get("POWERTOOLS_TRACER_CAPTURE_RESPONSE") == "false", name
        assert variables.get("POWERTOOLS_TRACER_CAPTURE_ERROR") == "false", name


def test_the_untraced_functions_are_the_ones_names_lists(template):
    """`names.UNTRACED_HANDLERS`, which the cold-start bench imports with the tracer off, is
    what the stack deploys untraced."""
    untraced = set()
    for function in resources(template, "AWS::Lambda::Function").values():
        properties = function["Properties"]
        variables = properties.get("Environment", {}).get("Variables", {})
        if variables.get("POWERTOOLS_TRACE_DISABLED") == "true":
            assert properties.get("TracingConfig", {}).get("Mode") != "Active"
            untraced.add(properties["Handler"])
    assert untraced == names.UNTRACED_HANDLERS
