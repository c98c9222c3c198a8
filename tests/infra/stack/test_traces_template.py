"""Every function runs with Powertools' response and error capture off, whatever its construct
passes: a presigned URL or secret a handler returns never reaches X-Ray (the code decides the
same in functions/observability.py; this holds a Tracer built anywhere else to it)."""

from __future__ import annotations

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
