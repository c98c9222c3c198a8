"""POST /code/uploads: an IAM-authorized route to the jobs function, which reads the Cloudflare
secret (to mint R2 keys for exactly the archive's keys) and nothing else of it."""

from __future__ import annotations

from typing import Any

from infra import names
from tests.infra.api.test_secrets_grants import statements_of
from tests.infra.conftest import resources


def _function(template: dict[str, Any], handler: str) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (k, f)
        for k, f in resources(template, "AWS::Lambda::Function").items()
        if f["Properties"].get("Handler") == handler
    ]
    return found


def test_the_code_upload_route_is_iam_authorized_and_served_by_the_jobs_function(template):
    routes = {
        r["Properties"]["RouteKey"]: r["Properties"]
        for r in resources(template, "AWS::ApiGatewayV2::Route").values()
    }
    route = routes["POST /code/uploads"]
    assert route["AuthorizationType"] == "AWS_IAM"
    jobs_id, _ = _function(template, names.JOBS_HANDLER)
    integration_id = route["Target"]["Fn::Join"][1][1]["Ref"]
    integration = template["Resources"][integration_id]["Properties"]
    assert jobs_id in str(integration["IntegrationUri"])


def test_the_jobs_function_reads_the_cloudflare_secret_only(template):
    _, jobs = _function(template, names.JOBS_HANDLER)
    env = jobs["Properties"]["Environment"]["Variables"]
    secret_ref = env[names.CLOUDFLARE_SECRET_ARN_ENV]
    assert names.VAST_SECRET_ARN_ENV not in env
    reads = [
        s for s in statements_of(template, names.JOBS_HANDLER)
        if s["Action"] == "ssm:GetParameter"
    ]  # fmt: skip
    assert len(reads) == 1 and reads[0]["Resource"] == secret_ref
    assert names.CLOUDFLARE_PARAMETER.lstrip("/") in str(secret_ref)


def test_the_heartbeat_function_cannot_read_the_cloudflare_secret(template):
    actions = [
        a
        for s in statements_of(template, names.HEARTBEAT_HANDLER)
        for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    ]
    assert not any(a.startswith("secretsmanager:") for a in actions)
    assert "ssm:GetParameter" not in actions  # its ssm:GetParameters: the user secrets only
