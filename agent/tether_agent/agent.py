"""The agent's life on a host: restore, train, upload, heartbeat, and the dead-man switch.

Exit codes (`ExitCode`): 0 training finished; the training command's own non-zero status is
passed through (128+N when a signal N killed it); 2 bad configuration; 10 lease expired (the
supervisor went silent); 11 stopped by a `stop` command; 12 superseded by a newer generation;
13 checkpoint storage unreadable at restore (no recorded checkpoint could even be judged);
14 the job's code could not be fetched or verified (`job_code.py`, `code_archive.py`; the
reason is in the log);
128+N the agent got signal N (SIGTERM, SIGINT) before training started.

Signals. SIGTERM and SIGINT are handled in every phase: during training they are forwarded to the
training group and the agent ends as the training does; before it, a restore in progress is
cancelled; either way the final heartbeat says `stopping` (stopped from outside: not `finished`,
even if the training exits 0) and the agent never dies of the signal itself. A signal after the
training has exited changes nothing: the final upload and heartbeat go on. If the agent dies
anyway (SIGKILL, the OOM killer), the training's guard (`guard.py`) stops the training.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from enum import IntEnum
from functools import partial
from types import FrameType
from typing import Any, TypeVar

from tether_agent.checkpoints import MIB, generation_prefix
from tether_agent.code_archive import archive_key, fetch_archive
from tether_agent.gpu import GpuMonitor, Probe, make_probe
from tether_agent.heartbeat import Heartbeater, Lease
from tether_agent.job_code import CodeUnavailable, fetch_git
from tether_agent.logs import LogShipper, TeeLog
from tether_agent.outputs import upload_outputs
from tether_agent.progress import ResumeWatch, current_step, misplaced_checkpoints
from tether_agent.protocol import (
    MAX_MISPLACED,
    MAX_MISPLACED_PATH,
    CheckpointRef,
    Command,
    HeartbeatRequest,
    OutputsRef,
    Phase,
    RestoreReport,
    SecretValues,
    SkippedCheckpoint,
    StorageCredentials,
    StorageKey,
)
from tether_agent.restore import Restored, parse_candidates, restore_latest
from tether_agent.runner import RotatingLog, TrainingProcess
from tether_agent.settings import AgentSettings, Tuning
from tether_agent.storage import (
    AccessDenied,
    RateLimiter,
    Storage,
    StorageError,
    TransferCancelled,
    TransferStats,
)
from tether_agent.storage_credentials import Credentials, CredentialStore
from tether_agent.training_env import training_env
from tether_agent.uploader import CheckpointUploader
from tether_agent.vast import stop_own_instance

log = logging.getLogger(__name__)
SIGNAL_CANCEL_WAIT_S = 2.0  # after a signal, how long a cancelled restore may take to stop
FIRST_STEP_POLL_S = 0.1  # how late the first step after the restore may be seen, at most
_T = TypeVar("_T")


RESTORE_CHECKPOINTS_VAR = "TETHER_RESTORE_CHECKPOINTS"


def _reasons(report: RestoreReport) -> str:
    return "; ".join(f"{s.manifest_key}: {s.reason}" for s in report.skipped)


class ExitCode(IntEnum):
    FINISHED = 0
    BAD_CONFIG = 2
    LEASE_EXPIRED = 10
    STOPPED = 11
    SUPERSEDED = 12
    STORAGE_FAILED = 13
    CODE_UNAVAILABLE = 14
    SECRETS_MISSING = 15


class Agent:
    def __init__(
        self,
        settings: AgentSettings,
        tuning: Tuning,
        command: Sequence[str],
        *,
        probe: Probe | None = None,
    ) -> None:
        self.settings = settings
        self.tuning = tuning
        self.command = list(command)
        self.phase: Phase = "starting"
        self.exit_code: int | None = None
        self.restored: Restored | None = None
        self.outputs: OutputsRef | None = None  # the outputs dir as uploaded (once, at the end)
        self._command: tuple[Command, str | None] | None = None
        self._signalled: int | None = None  # the last SIGTERM/SIGINT received, in any phase
        self._interrupted = False  # one reached the training before it exited: not `finished`
        self._wake = threading.Event()
        self._misplaced_said: set[str] = set()  # misplaced checkpoints already logged
        # The job's user secrets, from the first heartbeat reply that carries them; None until
        # then. Only the training command's environment gets them; the shipped log is scrubbed.
        self.user_secrets: SecretValues | None = None
        self._secrets_came = threading.Event()
        # Two keys: read-only on the job's prefix (restore), read-write on this generation's
        # own prefix (checkpoints, logs). `self.storage` writes, `self.reader` restores.
        self.credentials = CredentialStore(
            Credentials(
                access_key_id=settings.s3_write_access_key_id,
                secret_access_key=settings.s3_write_secret_access_key,
                session_token=settings.s3_write_session_token,
                expires_at=settings.s3_write_credentials_expire_at,
                endpoint=settings.s3_endpoint,
                bucket=settings.s3_bucket,
            )
        )
        self.read_credentials = CredentialStore(
            Credentials(
                access_key_id=settings.s3_access_key_id,
                secret_access_key=settings.s3_secret_access_key,
                session_token=settings.s3_session_token,
                expires_at=settings.s3_credentials_expire_at,
                endpoint=settings.s3_endpoint,
                bucket=settings.s3_bucket,
            )
        )
        limit = tuning.bandwidth_limit_mb_s
        limiter = RateLimiter(limit * 1e6 if limit else None)
        self.storage = self._storage(self.credentials, limiter, TransferStats(), None)
        self.reader = self._storage(
            self.read_credentials, limiter, self.storage.stats, self.storage.cancel
        )
        self.restore_report: RestoreReport | None = None
        self.resume = ResumeWatch()  # the step resumed at and when the first one after it came
        self.progress_file = settings.progress_file or settings.work_dir / "progress.json"
        self.uploader = CheckpointUploader(
            self.storage,
            settings.checkpoint_dir,
            settings.marker,
            settings.generation,
            settings.keep_last,
            file_concurrency=tuning.file_concurrency,
            prune_local=tuning.prune_local,
            poll_interval_s=tuning.poll_interval_s,
            on_uploaded=self._uploaded,
            on_refused=self._upload_refused,
        )
        self.log_shipper = LogShipper(
            self.storage,
            settings.generation,
            secrets=self._secret_values,
            segment_bytes=tuning.log_segment_bytes,
            interval_s=tuning.log_upload_interval_s or 2 * settings.heartbeat_interval_s,
        )
        self.lease = Lease(settings.first_lease_expires_at)
        self.gpu = GpuMonitor(
            probe or make_probe(settings.gpu_probe, settings.probe_timeout_s),
            interval_s=settings.heartbeat_interval_s,
        )
        self.heartbeater = Heartbeater(
            settings.api_url,
            settings.agent_token,
            settings.heartbeat_interval_s,
            self._heartbeat_request,
            self.lease,
            on_command=self._on_command,
            on_credentials=self._on_credentials,
            on_secrets=self._on_secrets,
        )
        self.training: TrainingProcess | None = None

    def _storage(
        self,
        store: CredentialStore,
        limiter: RateLimiter,
        stats: TransferStats,
        cancel: threading.Event | None,
    ) -> Storage:
        """A `Storage` on the job's prefix with one of the two keys; both share the bandwidth
        cap, the transfer counts and the cancel event."""
        s, tuning = self.settings, self.tuning
        return Storage(
            store,
            s.s3_prefix,
            concurrency=tuning.upload_concurrency,
            part_size=tuning.part_size_mb * MIB,
            limiter=limiter,
            nice=tuning.upload_nice,
            backoff_s=min(1.0, s.heartbeat_interval_s),
            credential_wait_s=max(4 * s.heartbeat_interval_s, 1.0),
            cancel=cancel,
            stats=stats,
        )

    # -- callbacks from other threads -------------------------------------------------------

    def _heartbeat_request(self) -> HeartbeatRequest:
        s = self.settings
        step = self._step()
        self.resume.observe(step)
        return HeartbeatRequest(
            job_id=s.job_id,
            generation=s.generation,
            phase=self.phase,
            step=step,
            last_checkpoint=self.uploader.last,
            restored_checkpoint=self.restored.ref if self.restored else None,
            restore=self.restore_report,
            misplaced_checkpoints=self._misplaced(),
            resumed=self.resume.report(),
            outputs=self.outputs,
            gpu=self.gpu.current(),
            exit_code=self.exit_code,
            bytes_downloaded=self.storage.stats.bytes_downloaded,
            bytes_uploaded=self.storage.stats.bytes_uploaded,
            agent_time=time.time(),
            credentials_expire_at=self._credentials_expire_at(),
            wants_secrets=bool(s.secret_names) and self.user_secrets is None,
        )

    def _misplaced(self) -> list[str]:
        """Checkpoints saved one level below the checkpoint dir (never uploaded); each new one
        is said once in the agent's log and the shipped training log."""
        s = self.settings
        found = misplaced_checkpoints(s.checkpoint_dir, s.marker, limit=MAX_MISPLACED)
        new = [path for path in found if path not in self._misplaced_said]
        if new:
            self._misplaced_said.update(new)
            message = (
                f"checkpoints found below the checkpoint dir, never uploaded: {', '.join(new)}; "
                f"save each checkpoint directly in {s.checkpoint_dir} (Hugging Face: "
                f"output_dir={s.checkpoint_dir})"
            )
            log.warning(message)
            self.log_shipper.note(message)
        return [path[:MAX_MISPLACED_PATH] for path in found]

    def _step(self) -> int | None:
        s = self.settings
        return current_step(s.checkpoint_dir, s.marker, self.progress_file)

    def _credentials_expire_at(self) -> float | None:
        """When the first of the two keys expires (None: neither says)."""
        found = [
            c.expires_at
            for c in (self.credentials.current(), self.read_credentials.current())
            if c.expires_at is not None
        ]
        return min(found) if found else None

    def _on_command(self, command: Command, reason: str | None) -> None:
        if self._command is None:
            log.warning("control plane says %s (%s)", command, reason or "no reason given")
            self._command = (command, reason)
        if command == "superseded":
            self.storage.cancel.set()  # upload nothing more, not even what is in flight
        self._wake.set()

    def _on_credentials(self, new: StorageCredentials) -> None:
        s = self.settings
        expected = (s.s3_prefix, generation_prefix(s.s3_prefix, s.generation))
        if (new.read.prefix, new.write.prefix) != expected:
            log.warning(
                "credentials for prefixes %s, %s ignored (expected %s, %s)",
                new.read.prefix, new.write.prefix, *expected,
            )  # fmt: skip
            return
        for store, key in ((self.read_credentials, new.read), (self.credentials, new.write)):
            store.offer(self._credentials_of(key, new))

    def _on_secrets(self, secrets: SecretValues) -> None:
        if self.user_secrets is None and self.settings.secret_names:
            self.user_secrets = secrets
            self._secrets_came.set()

    def _wait_for_secrets(self) -> str | None:
        """Wait (bounded) for the heartbeat reply carrying the job's secrets; why training
        cannot start, or None when every secret came (or the job needs none)."""
        names = self.settings.secret_names
        if not names:
            return None
        self.heartbeater.poke()
        deadline = time.monotonic() + self.tuning.secrets_wait_s
        while not self._secrets_came.wait(timeout=0.2):
            if self._command or self._signalled is not None:
                return None  # the caller's checks decide
            if time.monotonic() >= deadline:
                return (
                    f"the job's secrets ({', '.join(names)}) did not arrive within "
                    f"{self.tuning.secrets_wait_s:g} s"
                )
        got = self.user_secrets
        missing = sorted(set(names) - set(got.values) | set(got.missing)) if got else names
        if missing:
            return (
                f"secrets not stored: {', '.join(missing)} (store each with "
                "`tether secrets set NAME`, then submit again)"
            )
        return None

    def _credentials_of(self, key: StorageKey, new: StorageCredentials) -> Credentials:
        return Credentials(
            access_key_id=key.access_key_id,
            secret_access_key=key.secret_access_key,
            session_token=key.session_token,
            expires_at=key.expires_at,
            endpoint=new.endpoint,
            bucket=new.bucket,
        )

    def _secret_values(self) -> list[str]:
        """Everything secret this agent holds: scrubbed from the shipped log."""
        s = self.settings
        held = (self.credentials.current(), self.read_credentials.current())
        return [
            s.agent_token,
            s.container_api_key,
            s.s3_secret_access_key,
            s.s3_session_token,
            s.s3_write_secret_access_key,
            s.s3_write_session_token,
            *(c.secret_access_key for c in held),
            *(c.session_token for c in held),
            *(self.user_secrets.values.values() if self.user_secrets else ()),
        ]

    def _ship_rest_of_log(self) -> None:
        """Upload the buffered log before the final heartbeat or stopping the machine; a
        superseded generation uploads nothing more (the cancelled storage refuses it)."""
        self.log_shipper.close(upload_rest=not self.storage.cancel.is_set())

    def _uploaded(self, ref: CheckpointRef) -> None:
        self.heartbeater.poke()

    def _upload_refused(self, step: int, exc: AccessDenied) -> None:
        """Out of scope (403): the uploader already logged it and will not retry it with these
        credentials; say it in the shipped log too, where `tether logs` shows it."""
        self.log_shipper.note(f"checkpoint {step} not uploaded: {exc}")

    def _set_phase(self, phase: Phase) -> None:
        if phase != self.phase:
            log.info("phase: %s", phase)
            self.phase = phase
            self.heartbeater.poke()

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> int:
        s = self.settings
        s.work_dir.mkdir(parents=True, exist_ok=True)
        s.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        if s.outputs_dir is not None:
            s.outputs_dir.mkdir(parents=True, exist_ok=True)
        previous = self._handle_signals()
        self.gpu.start()
        self.heartbeater.start()
        try:
            return self._run()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.gpu.stop()
            self._ship_rest_of_log()
            self.uploader.close()
            self.storage.close()
            self.reader.close()

    def _run(self) -> int:
        problem = self._wait_for_secrets()
        if problem is not None and self._command is None and self._signalled is None:
            log.error("cannot start training: %s", problem)
            self.log_shipper.note(f"cannot start training: {problem}")
            self.exit_code = None
            self._set_phase("failed")
            self.heartbeater.stop(final=True)
            return ExitCode.SECRETS_MISSING
        if self._signalled is not None:
            return self._stopped_by_signal()
        if self._command or self.lease.expired():
            return self._shut_down()
        self._set_phase("restoring")
        try:
            no_code = self._fetch_code()  # first: a bad commit fails before any download
            readable = self._restore() if no_code is None else True
        except _Signalled:
            return self._stopped_by_signal()
        if self._signalled is not None:
            return self._stopped_by_signal()
        if no_code is not None and self._command is None:
            log.error("cannot fetch the job's code: %s", no_code)
            self.log_shipper.note(f"cannot fetch the job's code: {no_code}; training not started")
            self._set_phase("failed")
            self.heartbeater.stop(final=True)
            return ExitCode.CODE_UNAVAILABLE
        if not readable and self._command is None:
            self.exit_code = None
            self._set_phase("failed")
            self.heartbeater.stop(final=True)
            return ExitCode.STORAGE_FAILED
        if self.restored:
            self.uploader.already_remote(self.restored.ref.step, self.restored.ref)
        if self._command or self.lease.expired():
            return self._shut_down()

        self.uploader.start()
        self.log_shipper.start()
        restored = f"restored step {self.restored.ref.step}" if self.restored else "no checkpoint"
        self.log_shipper.note(
            f"generation {self.settings.generation} on instance {self.settings.container_id}: "
            f"{restored}; starting training"
        )
        self.training = TrainingProcess(
            self.command,
            self._child_env(),
            TeeLog(
                RotatingLog(
                    self.settings.work_dir / "logs" / "training.log",
                    self.tuning.log_max_bytes,
                    self.tuning.log_backups,
                ),
                self.log_shipper,
            ),
            orphan_grace_s=self.settings.grace_s,
            orphan_log=self.settings.work_dir / "logs" / "training.log",
            cwd=self.settings.code_dir,
        )
        baseline = self._step()  # what is on disk before the script ran
        try:
            self.training.start()
        except OSError as exc:
            log.error("cannot start the training command: %s", exc)
            self.exit_code = 127
            self._set_phase("failed")
            self.uploader.stop_watching()
            self.heartbeater.stop(final=True)
            return 127
        self.resume.started(self.restored.ref.step if self.restored else 0, baseline)
        self._set_phase("training")
        if self._signalled is not None and not self._interrupted:  # came while it started
            self._interrupted = True
            self.training.signal(self._signalled)

        while True:
            waiting = self.resume.waiting()  # for the first step: polled 10 times a second
            poll_s = FIRST_STEP_POLL_S if waiting else 1.0
            self.training.exited.wait(timeout=max(0.01, min(poll_s, self.lease.remaining_s())))
            if waiting:
                self.resume.observe(self._step())
            if self._command or self.lease.expired():
                return self._shut_down()
            code = self.training.poll()
            if code is not None:
                return self._finish(code)

    def _fetch_code(self) -> str | None:
        """Put the job's code in place, from git (`job_code.py`) or its archive
        (`code_archive.py`); why not, when it cannot be. Raises `_Signalled` when SIGTERM/SIGINT
        arrives meanwhile (git is then killed, a download cancelled)."""
        s = self.settings
        url, commit, sha256, dest = s.code_git, s.code_commit, s.code_archive_sha256, s.code_dir
        if dest is None:
            return None
        cancel = threading.Event()
        if sha256 is not None:
            what = f"archive {archive_key(s.s3_prefix, sha256)}"
            work = partial(fetch_archive, self.reader, s.s3_prefix, sha256, dest)
        elif url is not None and commit is not None:
            what = f"{url} at {commit}"
            work = partial(fetch_git, url, commit, dest, cancel=cancel)
        else:
            return None
        log.info("fetching the job's code: %s", what)
        try:
            self._unless_signalled(work)
        except CodeUnavailable as exc:
            return str(exc)
        except TransferCancelled:
            return None  # told to stop meanwhile: the command decides what happens next
        finally:
            cancel.set()
        self.log_shipper.note(f"code: {what}" + (", sha256 verified" if sha256 else ""))
        return None

    def _restore(self) -> bool:
        """Restore the newest usable recorded checkpoint; False when storage could not be read
        at all. A bad candidate never fails it: it is skipped and reported in the heartbeats.
        Raises `_Signalled` when SIGTERM/SIGINT arrives meanwhile (the restore is abandoned)."""
        s = self.settings
        candidates, unreadable = parse_candidates(s.restore_checkpoints)
        try:
            result = self._unless_signalled(
                lambda: restore_latest(
                    self.reader, candidates, s.generation, s.checkpoint_dir,
                    self.tuning.file_concurrency,
                )
            )  # fmt: skip
        except TransferCancelled:
            return True  # told to stop meanwhile: the command decides what happens next
        report = result.report
        if unreadable:  # said once, as a skip of the whole list
            skip = SkippedCheckpoint(manifest_key=RESTORE_CHECKPOINTS_VAR, reason=unreadable)
            report = report.model_copy(update={"skipped": [skip]})
        self.restored = result.restored
        self.restore_report = report
        if report.outcome == "unreadable":
            log.error("restore failed: storage could not be read (%s)", _reasons(report))
            return False
        if report.skipped:
            self.log_shipper.note(
                f"restore skipped {len(report.skipped)} recorded checkpoint(s): {_reasons(report)}"
            )
        if result.restored is None and report.candidates:
            self.log_shipper.note("no recorded checkpoint was usable: starting from scratch")
        return True

    def _finish(self, code: int) -> int:
        """Training ended on its own: upload what it marked, report, exit with its status."""
        log.info("training exited with %d", code)
        self.exit_code = code
        self._set_phase("uploading")
        self.uploader.stop_watching()
        try:
            self.uploader.upload_pending()
        except TransferCancelled:
            pass
        except StorageError as exc:
            log.error("final upload failed: %s", exc)
        if code == 0 or self._interrupted:
            self._upload_outputs()
        if self._command and self._command[0] != "continue":
            return self._shut_down()
        self.log_shipper.note(f"training exited with {code}")
        self._ship_rest_of_log()
        if self._interrupted:
            self._set_phase("stopping")  # stopped from outside: not finished, whatever its code
        else:
            self._set_phase("finished" if code == 0 else "failed")
        self.heartbeater.stop(final=True)
        return code

    def _shut_down(self) -> int:
        """Lease expired, `stop` or `superseded`: stop training, maybe upload, stop the host."""
        command = self._command[0] if self._command else None
        if command == "superseded":
            self.storage.cancel.set()
            reason = ExitCode.SUPERSEDED
        elif command == "stop":
            reason = ExitCode.STOPPED
        else:
            reason = ExitCode.LEASE_EXPIRED
            log.error("lease expired without renewal: stopping the job and this machine")
        self._set_phase("stopping")
        if self.training is not None:
            self.exit_code = self.training.terminate(self.settings.grace_s)
        self.uploader.stop_watching()
        if reason != ExitCode.SUPERSEDED:
            try:
                self.uploader.upload_pending()  # the final checkpoint, if one is marked
            except StorageError as exc:
                log.warning("final checkpoint not uploaded: %s", exc)
            if self.training is not None:
                self._upload_outputs()
        self.log_shipper.note(f"stopped ({reason.name.lower().replace('_', ' ')})")
        self._ship_rest_of_log()
        self.heartbeater.stop(final=reason != ExitCode.SUPERSEDED)
        stop_own_instance(
            self.settings.vast_url,
            self.settings.container_id,
            self.settings.container_api_key,
            self.settings.on_dead_man,
            backoff_s=min(1.0, self.settings.heartbeat_interval_s),
        )
        return reason

    def _upload_outputs(self) -> None:
        """The outputs dir, once, after the final checkpoint (`outputs.py`); a failure is said
        in the log and leaves `self.outputs` unset (the job then cannot end FINISHED)."""
        s = self.settings
        if s.outputs_dir is None or self.outputs is not None or self.storage.cancel.is_set():
            return
        try:
            self.outputs = upload_outputs(
                self.storage,
                s.outputs_dir,
                s.generation,
                self._step() or 0,
                file_concurrency=self.tuning.file_concurrency,
            )
        except (StorageError, OSError) as exc:
            log.error("outputs not uploaded: %s", exc)
            self.log_shipper.note(f"outputs not uploaded: {exc}")
            return
        what = f"{self.outputs.files} files, {self.outputs.bytes} bytes"
        if self.outputs.files == 0:
            what = f"nothing: {s.outputs_dir} is empty"
        log.info("outputs uploaded (%s): %s", what, self.outputs.manifest_key)
        self.log_shipper.note(f"outputs uploaded ({what})")
        self.heartbeater.poke()

    def _child_env(self) -> dict[str, str]:
        env = training_env(
            os.environ,
            checkpoint_dir=self.settings.checkpoint_dir,
            marker=self.settings.marker,
            progress_file=self.progress_file,
            restored_step=self.restored.ref.step if self.restored else None,
            resume_from=self.restored.local_dir if self.restored else None,
            code_dir=self.settings.code_dir,
            outputs_dir=self.settings.outputs_dir,
        )
        if self.user_secrets is not None:  # the training command's environment only
            env.update(self.user_secrets.values)
        return env

    # -- signals ----------------------------------------------------------------------------

    def _handle_signals(self) -> dict[int, Any]:
        """SIGTERM/SIGINT for the whole run (main thread only); returns the handlers replaced."""
        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self._signalled = signum
            training = self.training
            if training is None:
                log.warning("got signal %d before training: stopping", signum)
                self.storage.cancel.set()  # shared by `self.reader`: a restore stops too
            elif training.pid is not None:  # (still starting: `_run` forwards it once started)
                self._interrupted = self._interrupted or training.poll() is None
                log.info("got signal %d: forwarding it to the training group", signum)
                training.signal(signum)

        return {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}

    def _unless_signalled(self, work: Callable[[], _T]) -> _T:
        """`work()` in a thread, abandoned when a signal arrives: a transfer stuck in a socket
        cannot keep the final heartbeat from going out. Raises `_Signalled`."""
        result: list[_T] = []
        error: list[BaseException] = []
        done = threading.Event()

        def run() -> None:
            try:
                result.append(work())
            except BaseException as exc:  # re-raised in the caller's thread
                error.append(exc)
            finally:
                done.set()

        threading.Thread(target=run, name="restore", daemon=True).start()
        while not done.wait(0.1):
            if self._signalled is not None:
                done.wait(SIGNAL_CANCEL_WAIT_S)  # most transfers end at once, cancelled
                raise _Signalled
        if error:
            raise error[0]
        return result[0]

    def _stopped_by_signal(self) -> int:
        """A signal before training: report `stopping` and exit 128+N (the host is being stopped
        from outside; the control plane decides what comes next)."""
        signum = self._signalled or signal.SIGTERM
        log.warning("stopped by signal %d before training started", signum)
        self.exit_code = None
        self._set_phase("stopping")
        self.heartbeater.stop(final=True)
        return 128 + signum


class _Signalled(Exception):
    """SIGTERM/SIGINT arrived while the agent waited for work in another thread."""
