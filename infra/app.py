"""The CDK app, as `cdk.json` runs it (`npx cdk synth|deploy` from the repository root).

`make synth` / `tether deploy` call `infra.synth` directly, which needs neither Docker nor the CDK
CLI; this entry point exists so the CDK CLI's own commands (diff, destroy) work too.
"""

from __future__ import annotations

import os

from infra.synth import build_app


def main() -> None:
    bundle = os.environ.get("TETHER_BUNDLE", "1") != "0"
    app, _ = build_app(bundle=bundle, outdir=os.environ.get("CDK_OUTDIR"))
    app.synth()


if __name__ == "__main__":
    main()
