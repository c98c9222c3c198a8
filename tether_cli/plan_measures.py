"""What `tether plan` knows from tether's own runs: the pace and start-up learned for the job's
name (`functions/domain/pace.py`), read from the deployed control plane's `GET /measures`.

Asked only when an API is configured (`TETHER_API_URL`, or `--local` for the local stack), so
an offline plan never waits on the network; `--no-measures` skips it. An API that cannot be
reached or refuses is one warning line, and the plan goes on with the priors.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import ValidationError

from functions.domain.jobspec import JobSpec
from functions.domain.pace import JobMeasures
from tether_cli import output
from tether_cli.api_client import (
    API_URL_ENV,
    LOCAL_CREDENTIALS,
    LOCAL_REGION,
    TetherApi,
    resolve_api_url,
)
from tether_cli.output import CliError

MEASURES_TIMEOUT_S = 5.0

MeasuresSource = Literal["api", "offline", "skipped", "unavailable"]


@dataclass(frozen=True)
class PlanMeasures:
    measures: JobMeasures
    source: MeasuresSource
    detail: str  # one line for people: where the figures came from


def fetch_measures(
    job: JobSpec,
    *,
    local: bool,
    skip: bool,
    environ: Mapping[str, str] | None = None,
    timeout_s: float = MEASURES_TIMEOUT_S,
) -> PlanMeasures:
    """The measures for `job.name`, or none with the reason (module docstring)."""
    env = os.environ if environ is None else environ
    empty = JobMeasures(name=job.name)
    if skip:
        return PlanMeasures(empty, "skipped", "not asked (--no-measures): priors only")
    if not local and not env.get(API_URL_ENV):
        return PlanMeasures(
            empty, "offline", f"none: no API configured ({API_URL_ENV} or --local): priors only"
        )
    try:
        target = resolve_api_url(local=local, environ=env)
        # The local stack takes its own key (as `tether submit --local` signs); AWS: yours.
        credentials, region = (LOCAL_CREDENTIALS, LOCAL_REGION) if local else (None, None)
        with TetherApi(target, credentials=credentials, region=region, timeout_s=timeout_s) as api:
            body = api.measures(job.name)
        measures = JobMeasures.model_validate(body)
    except (CliError, ValidationError, ValueError) as exc:
        why = exc.message if isinstance(exc, CliError) else "the reply is not a measures document"
        output.warn(f"measures for {job.name} unavailable ({why}); planning with priors")
        return PlanMeasures(empty, "unavailable", f"unavailable ({why}): priors only")
    detail = (
        f"{len(measures.paces)} pace(s) and {len(measures.startups)} start-up figure(s) for "
        f"{job.name} from {target.source}"
    )
    return PlanMeasures(measures, "api", detail)
