"""Environment variables the agent reads (docs/architecture.md#rented-host).

The agent's settings model (`tether_agent/settings.py`) reads exactly these. On a rented host
the instance environment (Vast's `env`, `onstart.build_host_env`) sets only `INSTANCE_ENV`:
Vast bounds each value at 256 characters, so everything long or job-defined
(`FROM_HEARTBEAT`) comes in the reply to the agent's first heartbeat (`job_bootstrap.py`) and
the agent sets those names itself before it validates its settings. An agent started with them
already in its environment (tests, benchmarks) asks for nothing. Only job-scoped values: never
an account-wide key (Vast, Cloudflare or AWS). `CONTAINER_ID` / `CONTAINER_API_KEY` are set by
Vast itself.
"""

from __future__ import annotations

JOB_ID = "TETHER_JOB_ID"
GENERATION = "TETHER_GENERATION"
API_URL = "TETHER_API_URL"  # base URL; the agent POSTs to {API_URL}/agent/heartbeat
AGENT_TOKEN = "TETHER_AGENT_TOKEN"  # per-generation bearer token (stored hashed by the API)
RUN = "TETHER_RUN"  # the job's training command, run with `bash -c` when no command is given
CHECKPOINT_DIR = "TETHER_CHECKPOINT_DIR"
MARKER = "TETHER_MARKER"
PROGRESS_FILE = "TETHER_PROGRESS_FILE"  # optional
KEEP_LAST = "TETHER_KEEP_LAST"
OUTPUTS_DIR = "TETHER_OUTPUTS_DIR"  # optional: the job's outputs dir, uploaded at the end
S3_ENDPOINT = "TETHER_S3_ENDPOINT"
S3_BUCKET = "TETHER_S3_BUCKET"
S3_PREFIX = "TETHER_S3_PREFIX"  # jobs/<job_id>/ (the generation writes under g<generation>/)
# The read-only key on the job's prefix (restore reads every generation's checkpoints).
S3_ACCESS_KEY_ID = "TETHER_S3_ACCESS_KEY_ID"
S3_SECRET_ACCESS_KEY = "TETHER_S3_SECRET_ACCESS_KEY"
S3_SESSION_TOKEN = "TETHER_S3_SESSION_TOKEN"
S3_CREDENTIALS_EXPIRE_AT = "TETHER_S3_CREDENTIALS_EXPIRE_AT"  # epoch seconds
# The read-write key on the generation's own prefix, jobs/<job_id>/g<generation>/.
S3_WRITE_ACCESS_KEY_ID = "TETHER_S3_WRITE_ACCESS_KEY_ID"
S3_WRITE_SECRET_ACCESS_KEY = "TETHER_S3_WRITE_SECRET_ACCESS_KEY"
S3_WRITE_SESSION_TOKEN = "TETHER_S3_WRITE_SESSION_TOKEN"
S3_WRITE_CREDENTIALS_EXPIRE_AT = "TETHER_S3_WRITE_CREDENTIALS_EXPIRE_AT"  # epoch seconds
# The checkpoints the control plane recorded, newest first (a JSON list of CheckpointRef):
# the only ones this generation may restore.
RESTORE_CHECKPOINTS = "TETHER_RESTORE_CHECKPOINTS"
# The names (never the values) of the user secrets the job needs, comma-separated: the agent
# asks for their values in its heartbeats and starts training only once it has them.
SECRETS = "TETHER_SECRETS"
LEASE_EXPIRES_AT = "TETHER_LEASE_EXPIRES_AT"  # epoch seconds: the first lease, before any heartbeat
HEARTBEAT_INTERVAL_S = "TETHER_HEARTBEAT_INTERVAL_S"  # default 15
GRACE_S = "TETHER_GRACE_S"  # SIGTERM → SIGKILL grace, default 120
# Seconds between checkpoints the control plane computed for this host (optional): passed on to
# the training command, where tether_hooks.TetherCallback(save_by_time=True) saves on it.
CHECKPOINT_INTERVAL_S = "TETHER_CHECKPOINT_INTERVAL_S"
ON_DEAD_MAN = "TETHER_ON_DEAD_MAN"  # stop | destroy
VAST_URL = "TETHER_VAST_URL"  # default https://console.vast.ai (the simulator's URL locally)
GPU_PROBE = "TETHER_GPU_PROBE"  # nvml (default) | none | fake:<file> (local stack and tests)
PROBE_TIMEOUT_S = "TETHER_PROBE_TIMEOUT_S"  # default 10
WORK_DIR = "TETHER_WORK_DIR"  # agent state and logs, default /var/lib/tether
# The job's code from git (spec `code: {git, commit}`): cloned into $TETHER_WORK_DIR/code at
# that commit before the command runs, and the command runs there. Unset: the image as is.
CODE_GIT = "TETHER_CODE_GIT"
CODE_COMMIT = "TETHER_CODE_COMMIT"
# The job's code as an archive (spec `code: {dir}`, uploaded by `tether submit`): the sha256 of
# jobs/<job_id>/code/<sha256>.tar.gz, which the agent downloads with its read-only key,
# verifies and extracts into $TETHER_WORK_DIR/code. Never set together with CODE_GIT.
CODE_ARCHIVE_SHA256 = "TETHER_CODE_ARCHIVE_SHA256"
# The local stack only: the job's absolute paths the heartbeat brings (checkpoint dir, progress
# file, outputs dir) are taken below this directory, the local host's disk. Unset on Vast.
PATH_ROOT = "TETHER_PATH_ROOT"
CONTAINER_ID = "CONTAINER_ID"  # set by Vast: the instance id
CONTAINER_API_KEY = "CONTAINER_API_KEY"  # set by Vast: can only start/stop/destroy this instance

ALL = (
    JOB_ID, GENERATION, API_URL, AGENT_TOKEN, RUN, CHECKPOINT_DIR, MARKER, PROGRESS_FILE,
    OUTPUTS_DIR, KEEP_LAST, S3_ENDPOINT, S3_BUCKET, S3_PREFIX, S3_ACCESS_KEY_ID,
    S3_SECRET_ACCESS_KEY,
    S3_SESSION_TOKEN, S3_CREDENTIALS_EXPIRE_AT, S3_WRITE_ACCESS_KEY_ID, S3_WRITE_SECRET_ACCESS_KEY,
    S3_WRITE_SESSION_TOKEN, S3_WRITE_CREDENTIALS_EXPIRE_AT, RESTORE_CHECKPOINTS, LEASE_EXPIRES_AT,
    HEARTBEAT_INTERVAL_S, GRACE_S, ON_DEAD_MAN, VAST_URL, GPU_PROBE, PROBE_TIMEOUT_S, WORK_DIR,
    CONTAINER_ID, CONTAINER_API_KEY, CODE_GIT, CODE_COMMIT, CODE_ARCHIVE_SHA256, SECRETS,
    CHECKPOINT_INTERVAL_S, PATH_ROOT,
)  # fmt: skip

# What the instance environment may carry: short, fixed-size values only.
INSTANCE_ENV = (
    JOB_ID, GENERATION, API_URL, AGENT_TOKEN, LEASE_EXPIRES_AT, HEARTBEAT_INTERVAL_S, GRACE_S,
    CHECKPOINT_INTERVAL_S, ON_DEAD_MAN, VAST_URL, GPU_PROBE, PROBE_TIMEOUT_S, WORK_DIR,
)  # fmt: skip

# What comes over the heartbeat (`JobBootstrap`), never in the instance environment.
FROM_HEARTBEAT = (
    RUN, CHECKPOINT_DIR, MARKER, PROGRESS_FILE, KEEP_LAST, OUTPUTS_DIR, S3_ENDPOINT, S3_BUCKET,
    S3_PREFIX, S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY, S3_SESSION_TOKEN,
    S3_CREDENTIALS_EXPIRE_AT, S3_WRITE_ACCESS_KEY_ID, S3_WRITE_SECRET_ACCESS_KEY,
    S3_WRITE_SESSION_TOKEN, S3_WRITE_CREDENTIALS_EXPIRE_AT, RESTORE_CHECKPOINTS, SECRETS,
    CODE_GIT, CODE_COMMIT, CODE_ARCHIVE_SHA256,
)  # fmt: skip
