"""Account-wide keys the control plane uses (never a rented host): created with placeholders.

`tether/vast-api-key` holds the Vast API key as a plain string; `tether/cloudflare` a JSON
object with `account_id`, `api_token`, `parent_access_key_id`, `bucket`. README "Deploy" shows
how to set the real values after the first deploy.
"""

from __future__ import annotations

from aws_cdk import SecretValue
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra import names
from infra.constructs.nag import acknowledge

_NO_ROTATION = (
    "Third-party keys (Vast, Cloudflare): AWS cannot rotate them; the user rotates them at "
    "the provider and updates the secret."
)


class Secrets(Construct):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        placeholder = SecretValue.unsafe_plain_text(names.SECRET_PLACEHOLDER)
        self.vast_api_key = secretsmanager.Secret(
            self,
            "VastApiKey",
            secret_name=names.VAST_SECRET_NAME,
            description="Vast.ai API key (plain string). Set it after deploy; see README.",
            secret_string_value=placeholder,
        )
        self.cloudflare = secretsmanager.Secret(
            self,
            "Cloudflare",
            secret_name=names.CLOUDFLARE_SECRET_NAME,
            description="Cloudflare R2: JSON with " + ", ".join(names.CLOUDFLARE_SECRET_FIELDS),
            secret_object_value={
                field: SecretValue.unsafe_plain_text(names.SECRET_PLACEHOLDER)
                for field in names.CLOUDFLARE_SECRET_FIELDS
            },
        )
        for secret in (self.vast_api_key, self.cloudflare):
            acknowledge(secret, "AwsSolutions-SMG4", _NO_ROTATION)
