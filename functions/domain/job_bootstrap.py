"""The job as its agent receives it over the heartbeat (docs/architecture.md#rented-host). Pure.

Vast bounds each value of an instance's `env` at 256 characters (and the whole env at 32 KB), so
the instance environment carries only what bootstraps the agent (`onstart.build_host_env`: job
id, generation, API URL, agent token, short fixed-size settings). Everything long or job-defined
travels in the reply to the agent's first heartbeat that asks (`wants_job`), which only the
current generation's token gets while it is told to continue: the command, checkpoint and
outputs settings, code, the job's own `env`, its secrets' names, the checkpoints to restore and
the generation's two storage keys.

The storage keys are the generation's record as provision minted it and the monitor renews it
(`Generation.credentials`): the same record every renewal already hands out, so the bootstrap
stores no key anywhere new. The restore candidates are recomputed from the job's recorded
checkpoints (`checkpoint_record.restore_candidates`), as provision computed them: only a
generation older than this one can have written them, and none of those can record anything
once it is superseded, so the list is the one provision saw (or newer, when an old generation's
last heartbeat recorded a checkpoint between the two), and nothing is stored for it.
"""

from __future__ import annotations

from collections.abc import Mapping

from functions.domain import agent_env
from functions.domain.checkpoint_record import restore_candidates
from functions.domain.heartbeat_contract import MAX_RESTORE_CANDIDATES, JobBootstrap
from functions.domain.job import Generation, Job
from functions.domain.storage_layout import generation_prefix, job_prefix


def job_bootstrap(job: Job, generation: Generation) -> JobBootstrap | None:
    """What the agent of `generation` runs; None while the generation holds no storage keys
    scoped to it (read-only on the job's prefix, read-write on its own): the agent keeps
    asking, and stops itself when its lease runs out."""
    storage = generation.credentials
    if storage is None or (storage.read.prefix, storage.write.prefix) != (
        job_prefix(job.job_id),
        generation_prefix(job.job_id, generation.generation),
    ):
        return None
    spec = job.spec
    code = spec.code
    return JobBootstrap(
        run=spec.run,
        checkpoint_dir=spec.checkpoint.dir,
        marker=spec.checkpoint.marker,
        progress_file=spec.checkpoint.progress_file,
        keep_last=spec.checkpoint.keep_last,
        outputs_dir=spec.outputs.dir if spec.outputs else None,
        code_git=code.git if code else None,
        code_commit=code.commit if code else None,
        code_archive_sha256=code.archive.sha256 if code and code.archive else None,
        env=dict(spec.env),
        secrets=list(spec.secrets),
        restore=restore_candidates(job, generation.generation)[:MAX_RESTORE_CANDIDATES],
        storage=storage,
    )


def environ_with_job(environ: Mapping[str, str], job: JobBootstrap) -> dict[str, str]:
    """`environ` (an instance environment) with the job as the agent sets it before it reads
    its settings: the job's own `env`, then the job under the `agent_env` names. The agent's
    copy is `tether_agent/bootstrap.py::environ_with_job` (a contract test keeps the two equal);
    the local stack's evidence reads what a host was given through this one."""
    merged = dict(environ)
    merged.update(job.env)
    storage = job.storage
    ours: dict[str, str | None] = {
        agent_env.RUN: job.run,
        agent_env.CHECKPOINT_DIR: job.checkpoint_dir,
        agent_env.MARKER: job.marker,
        agent_env.PROGRESS_FILE: job.progress_file,
        agent_env.KEEP_LAST: str(job.keep_last),
        agent_env.OUTPUTS_DIR: job.outputs_dir,
        agent_env.CODE_GIT: job.code_git,
        agent_env.CODE_COMMIT: job.code_commit,
        agent_env.CODE_ARCHIVE_SHA256: job.code_archive_sha256,
        agent_env.SECRETS: ",".join(job.secrets) or None,
        agent_env.RESTORE_CHECKPOINTS: (
            "[" + ",".join(r.model_dump_json(exclude_none=True) for r in job.restore) + "]"
            if job.restore
            else None
        ),
        agent_env.S3_ENDPOINT: storage.endpoint,
        agent_env.S3_BUCKET: storage.bucket,
        agent_env.S3_PREFIX: storage.read.prefix,
        agent_env.S3_ACCESS_KEY_ID: storage.read.access_key_id,
        agent_env.S3_SECRET_ACCESS_KEY: storage.read.secret_access_key,
        agent_env.S3_SESSION_TOKEN: storage.read.session_token or None,
        agent_env.S3_CREDENTIALS_EXPIRE_AT: repr(float(storage.read.expires_at)),
        agent_env.S3_WRITE_ACCESS_KEY_ID: storage.write.access_key_id,
        agent_env.S3_WRITE_SECRET_ACCESS_KEY: storage.write.secret_access_key,
        agent_env.S3_WRITE_SESSION_TOKEN: storage.write.session_token or None,
        agent_env.S3_WRITE_CREDENTIALS_EXPIRE_AT: repr(float(storage.write.expires_at)),
    }
    for name, value in ours.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    return merged
