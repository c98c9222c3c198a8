"""The control plane's provider keys (`vast`, `cloudflare`) in SSM Parameter Store.

Each is a SecureString parameter (`infra/names.py`: `/tether/account/…`), encrypted with the
AWS-managed `aws/ssm` key: free at rest, where the Secrets Manager secrets of earlier stacks
cost $0.40 a month each. CloudFormation cannot create a SecureString, so `tether deploy` calls
`prepare` before every deploy: a missing parameter is created, with the value of the old
stack's secret when one can still be read (the deploy then deletes that secret), else with the
placeholder the functions recognise as "not set yet". `tether secrets set` overwrites it.
"""

from __future__ import annotations

import json
from typing import Any

from infra import names
from tether_cli.output import EXIT_FAILURE, CliError

# which → (parameter, the Secrets Manager secret of stacks from before the SSM parameters)
KEYS = {
    "vast": (names.VAST_KEY_PARAMETER, names.VAST_SECRET_NAME),
    "cloudflare": (names.CLOUDFLARE_PARAMETER, names.CLOUDFLARE_SECRET_NAME),
}
DESCRIPTIONS = {
    "vast": "tether: the Vast.ai API key",
    "cloudflare": "tether: Cloudflare R2 settings (JSON: "
    + ", ".join(names.CLOUDFLARE_SECRET_FIELDS)
    + ")",
}


def placeholder(which: str) -> str:
    """What a key holds until it is set (`functions/adapters/factory.py` says "not set")."""
    if which == "cloudflare":
        fields = dict.fromkeys(names.CLOUDFLARE_SECRET_FIELDS, names.SECRET_PLACEHOLDER)
        return json.dumps(fields, separators=(",", ":"))
    return names.SECRET_PLACEHOLDER


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def store(ssm: Any, which: str, value: str, *, overwrite: bool = True) -> int:
    """Write one key as a SecureString; its new version."""
    parameter, _ = KEYS[which]
    reply = ssm.put_parameter(
        Name=parameter,
        Value=value,
        Type="SecureString",
        Description=DESCRIPTIONS[which],
        Tier="Standard",  # free; an Advanced parameter costs $0.05 a month
        Overwrite=overwrite,
    )
    return int(reply.get("Version", 1))


def _legacy_value(secretsmanager: Any, secret_name: str) -> str | None:
    """The old stack's secret, or None when it is gone or scheduled for deletion."""
    from botocore.exceptions import ClientError

    try:
        return str(secretsmanager.get_secret_value(SecretId=secret_name)["SecretString"])
    except ClientError as exc:
        if _code(exc) in ("ResourceNotFoundException", "InvalidRequestException"):
            return None
        raise


def prepare(region: str, *, session: Any = None) -> list[str]:
    """Create the parameters that do not exist yet (moving an old stack's secrets over); what
    was done, one line each. Existing parameters are never touched."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    session = session or boto3.session.Session(region_name=region)
    ssm = session.client("ssm", region_name=region)
    done: list[str] = []
    try:
        for which, (parameter, legacy) in KEYS.items():
            try:
                ssm.get_parameter(Name=parameter, WithDecryption=False)
                continue
            except ClientError as exc:
                if _code(exc) != "ParameterNotFound":
                    raise
            old = _legacy_value(session.client("secretsmanager", region_name=region), legacy)
            store(ssm, which, old if old is not None else placeholder(which), overwrite=False)
            if old is not None:
                done.append(f"moved the {which} key from secret {legacy} to SSM {parameter}")
            else:
                done.append(f"created {parameter}: set it with `tether secrets set {which}`")
    except (BotoCoreError, ClientError) as exc:
        raise CliError(
            f"cannot prepare the provider keys in SSM ({region}): {exc}", EXIT_FAILURE
        ) from None
    return done


def holds_a_key(which: str, value: str) -> bool:
    """Whether a stored value is a key, not the placeholder `prepare` creates: the functions'
    own test of "not set" (`functions/adapters/factory.py`), every Cloudflare field included."""
    if which == "cloudflare":
        try:
            data = json.loads(value)
        except ValueError:
            return False
        return isinstance(data, dict) and all(
            data.get(f) and data.get(f) != names.SECRET_PLACEHOLDER
            for f in names.CLOUDFLARE_SECRET_FIELDS
        )
    key = value.strip()
    return bool(key) and key != names.SECRET_PLACEHOLDER


def keys_to_set(region: str, *, session: Any = None) -> list[str]:
    """The provider keys (`vast`, `cloudflare`) that hold no key yet in `region`. One that cannot
    be read (missing, or no permission to decrypt it) counts as not set: saying to set it again
    is harmless, saying nothing about a missing key is not."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    session = session or boto3.session.Session(region_name=region)
    ssm = session.client("ssm", region_name=region)
    missing: list[str] = []
    for which, (parameter, _) in KEYS.items():
        try:
            value = str(
                ssm.get_parameter(Name=parameter, WithDecryption=True)["Parameter"]["Value"]
            )
        except (BotoCoreError, ClientError):
            value = ""
        if not holds_a_key(which, value):
            missing.append(which)
    return missing
