"""Account-wide keys the control plane uses (never a rented host): two SSM SecureString
parameters, `/tether/account/vast` (the Vast API key) and `/tether/account/cloudflare` (JSON
with `account_id`, `api_token`, `parent_access_key_id`, `bucket`).

Why SSM: standard parameters are free at rest and the AWS-managed `aws/ssm` key has no monthly
fee, where each Secrets Manager secret costs $0.40 a month (the two were 21 % of an idle month).
CloudFormation cannot create a SecureString, so the stack holds no resource for them: `tether
deploy` creates them (`tether_cli/provider_keys.py`) and `tether secrets set` fills them. This
construct knows their ARNs and grants reading them: `ssm:GetParameter` on the one parameter, and
`kms:Decrypt` only through SSM and only for that parameter's encryption context.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra import names
from infra.constructs.nag import acknowledge

READ_ACTIONS = ("ssm:GetParameter",)
DECRYPT_ACTIONS = ("kms:Decrypt",)


class ProviderKey:
    """One provider key's parameter: its name, its ARN, and the grant to read it."""

    def __init__(self, scope: Construct, parameter_name: str) -> None:
        self._stack = Stack.of(scope)
        self.parameter_name = parameter_name
        self.parameter_arn = self._stack.format_arn(
            service="ssm", resource="parameter", resource_name=parameter_name.lstrip("/")
        )

    def grant_read(self, role: iam.IRole) -> None:
        stack = self._stack
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=list(READ_ACTIONS), resources=[self.parameter_arn])
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=list(DECRYPT_ACTIONS),
                resources=[stack.format_arn(service="kms", resource="key", resource_name="*")],
                conditions={
                    "StringEquals": {
                        "kms:ViaService": f"ssm.{stack.region}.amazonaws.com",
                        "kms:EncryptionContext:PARAMETER_ARN": self.parameter_arn,
                    }
                },
            )
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5",
            "The default aws/ssm key's id is not known at synth: Decrypt is limited to calls "
            "through SSM for the provider key parameters.",
            "Resource::arn:<AWS::Partition>:kms:<AWS::Region>:<AWS::AccountId>:key/*",
        )


class Secrets(Construct):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.vast_api_key = ProviderKey(self, names.VAST_KEY_PARAMETER)
        self.cloudflare = ProviderKey(self, names.CLOUDFLARE_PARAMETER)
