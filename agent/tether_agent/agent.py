"""The agent's life on a host: restore, train, upload, heartbeat, and the dead-man switch.

Exit codes: `ExitCode` below; agent/README.md's table says what each means to a user (0 is
training finished; the training command's own non-zero status is passed through).

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
from collections.abc import Callable, Mapping, Sequence
from enum import IntEnum
from types import FrameType
from typing import Any

from tether_agent.abandon import Abandoned, run_until_stopped
from tether_agent.checkpoints import generation_prefix
from tether_agent.code_source import code_source
from tether_agent.gpu import GpuMonitor, Probe, make_probe
from tether_agent.heartbeat_sender import Heartbeater, Lease
from tether_agent.job_code import CodeUnavailable
from tether_agent.job_storage import JobStorage
from tether_agent.logs import LogShipper, OutputTail, TeeLog, scrub
from tether_agent.outputs import upload_outputs
from tether_agent.progress import NeverUploadedReporter, ResumeWatch, current_step, read_steps
from tether_agent.protocol import (
    MAX_EXIT_OUTPUT,
    MAX_EXIT_OUTPUT_LINES,
    MAX_MISPLACED,
    MAX_MISPLACED_PATH,
    CheckpointRef,
    Command,
    HeartbeatRequest,
    OutputsRef,
    Phase,
    RestoreReport,
)
from tether_agent.restore import Restored, restore_recorded, skip_reasons
from tether_agent.runner import RotatingLog, TrainingProcess
from tether_agent.secrets_inbox import SecretsInbox
from tether_agent.settings import AgentSettings, Tuning
from tether_agent.stale_uploads import abort_stale_uploads
from tether_agent.storage import AccessDenied, StorageError, TransferCancelled
from tether_agent.training_env import training_env
from tether_agent.uploader import CheckpointUploader
from tether_agent.vast import stop_own_instance

log = logging.getLogger(__name__)
FIRST_STEP_POLL_S = 0.1  # how late the first step after the restore may be seen, at most
COMMAND_NOT_STARTED = 127  # the exit code when the training command cannot start, as in a shell


class ExitCode(IntEnum):
    FINISHED = 0
    BAD_CONFIG = 2
    LEASE_EXPIRED = 10
    STOPPED = 11
    SUPERSEDED = 12
    STORAGE_FAILED = 13
    CODE_UNAVAILABLE = 14
    SECRETS_MISSING = 15


class CannotTrain(Exception):
    """Training cannot start on this host: what `Agent._fail`, the run's one failure path,
    says and reports."""

    def __init__(
        self,
        exit_code: int,
        reason: str | None = None,
        *,
        note: str | None = None,
        training_exit_code: int | None = None,
    ) -> None:
        super().__init__(reason or f"exit code {exit_code}")
        self.exit_code = exit_code  # the agent's
        self.reason = reason  # logged as an error; None: logged where it was found
        self.note = note  # in the shipped log too (`tether logs`)
        self.training_exit_code = training_exit_code  # the final heartbeat's `exit_code`


class ShutdownDue(Exception):
    """Before training: the control plane said `stop` or `superseded`, or the lease ran out."""


class Agent:
    def __init__(
        self,
        settings: AgentSettings,
        tuning: Tuning,
        command: Sequence[str],
        *,
        probe: Probe | None = None,
        lease: Lease | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """`lease`: the one the job's bootstrap heartbeats renewed (`bootstrap.py`), else the
        environment's; `environ`: what the training command's environment is made from (the
        process's, with the job the bootstrap brought), else the process's own."""
        self.settings = settings
        self.environ = os.environ if environ is None else environ
        self.tuning = tuning
        self.command = list(command)
        self.phase: Phase = "starting"
        self.exit_code: int | None = None
        self.exit_output: str | None = None  # why it failed, in every heartbeat from then on
        self.restored: Restored | None = None
        self.outputs: OutputsRef | None = None  # the outputs dir as uploaded (once, at the end)
        self._command: tuple[Command, str | None] | None = None
        self._signalled: int | None = None  # the last SIGTERM/SIGINT received, in any phase
        self._interrupted = False  # one reached the training before it exited: not `finished`
        self._wake = threading.Event()
        self.never_uploaded = NeverUploadedReporter(
            settings.checkpoint_dir, settings.marker, self._say_never_uploaded
        )
        # The job's user secrets (`secrets_inbox.py`): the training command's env only.
        self.user_secrets = SecretsInbox(settings.secret_names)
        self.keys = JobStorage(settings, tuning)  # `storage` writes, `reader` restores
        self.storage, self.reader = self.keys.writer, self.keys.reader
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
        # The end of the training output: the heartbeat's `exit_output` after a non-zero exit.
        self.output_tail = OutputTail(
            MAX_EXIT_OUTPUT_LINES, MAX_EXIT_OUTPUT, secrets=self._secret_values
        )
        self.lease = lease or Lease(settings.first_lease_expires_at)
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
            on_credentials=self.keys.offer,
            on_secrets=self.user_secrets.offer,
        )
        self.training: TrainingProcess | None = None

    # -- callbacks from other threads -------------------------------------------------------

    def _heartbeat_request(self) -> HeartbeatRequest:
        s = self.settings
        on_disk = read_steps(s.checkpoint_dir, s.marker, self.progress_file)  # one read of each
        step = on_disk.step
        self.resume.observe(step)
        never_uploaded = self.never_uploaded.scan(MAX_MISPLACED)  # one walk for both lists
        return HeartbeatRequest(
            job_id=s.job_id,
            generation=s.generation,
            phase=self.phase,
            step=step,
            total_steps=on_disk.total,
            last_checkpoint=self.uploader.last,
            restored_checkpoint=self.restored.ref if self.restored else None,
            restore=self.restore_report,
            misplaced_checkpoints=[p[:MAX_MISPLACED_PATH] for p in never_uploaded.misplaced],
            unmarked_checkpoints=[p[:MAX_MISPLACED_PATH] for p in never_uploaded.unmarked],
            resumed=self.resume.report(),
            outputs=self.outputs,
            gpu=self.gpu.current(),
            exit_code=self.exit_code,
            exit_output=self.exit_output,
            bytes_downloaded=self.storage.stats.bytes_downloaded,
            bytes_uploaded=self.storage.stats.bytes_uploaded,
            last_upload_s=self.uploader.last_upload_s,
            agent_time=time.time(),
            credentials_expire_at=self.keys.expire_at(),
            wants_secrets=self.user_secrets.wanted,
        )

    def _say_never_uploaded(self, message: str) -> None:
        log.warning(message)
        self.log_shipper.note(message)

    def _step(self) -> int | None:
        s = self.settings
        return current_step(s.checkpoint_dir, s.marker, self.progress_file)

    def _on_command(self, command: Command, reason: str | None) -> None:
        if self._command is None:
            log.warning("control plane says %s (%s)", command, reason or "no reason given")
            self._command = (command, reason)
        if command == "superseded":
            self.storage.cancel.set()  # upload nothing more, not even what is in flight
        self._wake.set()

    def _secret_values(self) -> list[str]:
        """Everything secret this agent holds: scrubbed from the shipped log."""
        s = self.settings
        held = [s.agent_token, s.container_api_key, *self.keys.secrets()]
        return held + list(self.user_secrets.values().values())

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
            self.keys.close()

    def _run(self) -> int:
        """The phases in order. Before training, a phase ends the run by raising: `CannotTrain`
        (the one failure path, `_fail`), `Abandoned` (SIGTERM/SIGINT: `_stopped_by_signal`) or
        `ShutdownDue` (a command or the lease: `_shut_down`); training ends it in `_train`."""
        try:
            self._await_secrets()
            self._renew_lease_if_expired()
            self._raise_if_shutdown_due()
            self._fetch_code_and_restore()
            self._adopt_earlier_uploads()
            self._raise_if_shutdown_due()
            training = self._start_training()
        except CannotTrain as failure:
            return self._fail(failure)
        except Abandoned:
            return self._stopped_by_signal()
        except ShutdownDue:
            return self._shut_down()
        return self._train(training)

    def _await_secrets(self) -> None:
        """Phase `starting`: wait for the job's user secrets, if it has any (`secrets_inbox.py`);
        `CannotTrain` when one is not stored or they did not arrive in time."""
        if self.user_secrets.wanted:
            self.heartbeater.poke()  # ask now, not one interval from now
        problem = self.user_secrets.wait(
            self.tuning.secrets_wait_s,
            lambda: self._command is not None or self._signalled is not None,
        )
        failure = None
        if problem is not None:
            why = f"cannot start training: {problem}"
            failure = CannotTrain(ExitCode.SECRETS_MISSING, why, note=why)
        self._fail_unless_overruled(failure)

    def _renew_lease_if_expired(self) -> None:
        if self.lease.expired():  # started again with its rent's lease (back from an outbid)
            self.heartbeater.await_reply()  # renews it only while the job is supervised

    def _fetch_code_and_restore(self) -> None:
        """Phase `restoring`: the job's code, then the newest usable recorded checkpoint;
        `CannotTrain` when the code cannot be fetched or storage cannot be read."""
        self._set_phase("restoring")
        no_code = self._fetch_code()  # first: a bad commit fails before any download
        readable = self._restore() if no_code is None else True
        failure = None
        if no_code is not None:
            why = f"cannot fetch the job's code: {no_code}"
            failure = CannotTrain(
                ExitCode.CODE_UNAVAILABLE, why, note=f"{why}; training not started"
            )
        elif not readable:
            failure = CannotTrain(ExitCode.STORAGE_FAILED)  # `_restore` logged why
        self._fail_unless_overruled(failure)

    def _fetch_code(self) -> str | None:
        """Put the job's code in place (`code_source.py`); why not, when it cannot be. Raises
        `Abandoned` when SIGTERM/SIGINT arrives meanwhile (git killed, a download cancelled)."""
        cancel = threading.Event()
        source = code_source(self.settings, self.reader, cancel)
        if source is None:
            return None
        log.info("fetching the job's code: %s", source.what)
        try:
            self._run_until_signalled(source.fetch)
        except CodeUnavailable as exc:
            return str(exc)
        except TransferCancelled:
            return None  # told to stop meanwhile: the command decides what happens next
        finally:
            cancel.set()
        self.log_shipper.note(f"code: {source.what}" + (", sha256 verified" * source.verified))
        return None

    def _restore(self) -> bool:
        """Restore the newest usable recorded checkpoint; False when storage could not be read
        at all. A bad candidate never fails it: it is skipped and reported in the heartbeats.
        Raises `Abandoned` when SIGTERM/SIGINT arrives meanwhile (the restore is abandoned)."""
        s = self.settings
        try:
            result = self._run_until_signalled(
                lambda: restore_recorded(
                    self.reader, s.restore_checkpoints, s.generation, s.checkpoint_dir,
                    self.tuning.file_concurrency, marker=s.marker,
                )
            )  # fmt: skip
        except TransferCancelled:
            return True  # told to stop meanwhile: the command decides what happens next
        report = result.report
        self.restored = result.restored
        self.restore_report = report
        if report.outcome == "unreadable":
            log.error("restore failed: storage could not be read (%s)", skip_reasons(report))
            return False
        if report.skipped:
            skipped = f"{len(report.skipped)} recorded checkpoint(s): {skip_reasons(report)}"
            self.log_shipper.note(f"restore skipped {skipped}")
        if result.restored is None and report.candidates:
            self.log_shipper.note("no recorded checkpoint was usable: starting from scratch")
        return True

    def _adopt_earlier_uploads(self) -> None:
        """Tell the uploader what storage already holds: the restored checkpoint, and this
        generation's own checkpoints when it is started again on its disk (after an outbid);
        its unfinished uploads from before (killed mid-upload) are aborted."""
        if self.restored:
            self.uploader.already_remote(self.restored.ref.step, self.restored.ref)
        own = generation_prefix(self.settings.s3_prefix, self.settings.generation)
        if stale := abort_stale_uploads(self.storage, own):
            self.log_shipper.note(f"started again: {stale} unfinished uploads aborted")
        if adopted := self.uploader.adopt_remote():
            self.log_shipper.note(f"started again: checkpoints {adopted} already uploaded")

    def _start_training(self) -> TrainingProcess:
        """Start the uploader, the log shipper and the training command (phase `training`);
        `CannotTrain` (127, as a shell says it) when the command cannot be started."""
        self.uploader.start()
        self.log_shipper.start()
        restored = f"restored step {self.restored.ref.step}" if self.restored else "no checkpoint"
        self.log_shipper.note(
            f"generation {self.settings.generation} on instance {self.settings.container_id}: "
            f"{restored}; starting training"
        )
        self.training = training = TrainingProcess(
            self.command,
            self._child_env(),
            TeeLog(
                RotatingLog(
                    self.settings.work_dir / "logs" / "training.log",
                    self.tuning.log_max_bytes,
                    self.tuning.log_backups,
                ),
                self.log_shipper,
                self.output_tail,
            ),
            orphan_grace_s=self.settings.grace_s,
            orphan_log=self.settings.work_dir / "logs" / "training.log",
            cwd=self.settings.code_dir,
        )
        baseline = self._step()  # what is on disk before the script ran
        try:
            training.start()
        except OSError as exc:
            why = f"cannot start the training command: {exc}"
            failure = CannotTrain(COMMAND_NOT_STARTED, why, training_exit_code=COMMAND_NOT_STARTED)
            raise failure from exc
        self.resume.started(self.restored.ref.step if self.restored else 0, baseline)
        self._set_phase("training")
        if self._signalled is not None and not self._interrupted:  # came while it started
            self._interrupted = True
            training.signal(self._signalled)
        return training

    def _child_env(self) -> dict[str, str]:
        env = training_env(
            self.environ,
            checkpoint_dir=self.settings.checkpoint_dir,
            marker=self.settings.marker,
            progress_file=self.progress_file,
            restored_step=self.restored.ref.step if self.restored else None,
            resume_from=self.restored.local_dir if self.restored else None,
            code_dir=self.settings.code_dir,
            outputs_dir=self.settings.outputs_dir,
            checkpoint_interval_s=self.settings.checkpoint_interval_s,
        )
        env.update(self.user_secrets.values())  # the training command's environment only
        return env

    def _train(self, training: TrainingProcess) -> int:
        """Wait for the training to exit (`_finish`), or for a command or the lease's end
        (`_shut_down`); meanwhile watch for the first step after the restored one."""
        while True:
            waiting = self.resume.waiting()  # for the first step: polled 10 times a second
            poll_s = FIRST_STEP_POLL_S if waiting else 1.0
            training.exited.wait(timeout=max(0.01, min(poll_s, self.lease.remaining_s())))
            if waiting:
                self.resume.observe(self._step())
            if self._shutdown_due():
                return self._shut_down()
            code = training.poll()
            if code is not None:
                return self._finish(code)

    def _finish(self, code: int) -> int:
        """Training ended on its own: upload what it marked, report, exit with its status."""
        log.info("training exited with %d", code)
        if code != 0 and not self._interrupted:  # its own failure: say why (the tail)
            self.exit_output = self.output_tail.text()
        self.exit_code = code  # (after the output: a heartbeat between has neither)
        self._set_phase("uploading")
        self._final_upload(code)
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

    def _final_upload(self, code: int) -> None:
        """Phase `uploading`: the last checkpoint the training marked, then the outputs dir when
        the training finished (exit 0) or was stopped from outside."""
        self.uploader.stop_watching()
        try:
            self.uploader.upload_pending()
        except TransferCancelled:
            pass
        except StorageError as exc:
            log.error("final upload failed: %s", exc)
        if code == 0 or self._interrupted:
            self._upload_outputs()

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

    # -- how the run ends before training, or with a command or the lease --------------------

    def _fail_unless_overruled(self, failure: CannotTrain | None) -> None:
        """Before training a signal overrules everything (`Abandoned`), and a command from the
        control plane overrules a failure (obeyed at the next `_raise_if_shutdown_due`);
        otherwise raise `failure`, if any."""
        if self._signalled is not None:
            raise Abandoned
        if failure is not None and self._command is None:
            raise failure

    def _shutdown_due(self) -> bool:
        """The control plane said `stop` or `superseded`, or the lease ran out."""
        return bool(self._command) or self.lease.expired()

    def _raise_if_shutdown_due(self) -> None:
        if self._shutdown_due():
            raise ShutdownDue

    def _fail(self, failure: CannotTrain) -> int:
        """The run's one failure path: training cannot start on this host. Say why, report
        `failed` in the final heartbeat and exit with the failure's code; the machine is not
        stopped here (the control plane decides what comes next)."""
        if failure.reason is not None:
            log.error("%s", failure.reason)
        if failure.note is not None:
            self.log_shipper.note(failure.note)
        self.exit_code = failure.training_exit_code
        if failure.reason is not None:  # scrubbed as the shipped log's note is
            said = scrub(failure.reason.encode(), self._secret_values())
            self.exit_output = said.decode(errors="replace")[-MAX_EXIT_OUTPUT:]
        self._set_phase("failed")
        self.uploader.stop_watching()  # (a no-op unless the training command failed to start)
        self.heartbeater.stop(final=True)
        return failure.exit_code

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

    def _stopped_by_signal(self) -> int:
        """A signal before training: report `stopping` and exit 128+N (the host is being stopped
        from outside; the control plane decides what comes next)."""
        signum = self._signalled or signal.SIGTERM
        log.warning("stopped by signal %d before training started", signum)
        self.exit_code = None
        self._set_phase("stopping")
        self.heartbeater.stop(final=True)
        return 128 + signum

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
            elif training.pid is not None:  # (still starting: `_start_training` forwards it)
                self._interrupted = self._interrupted or training.poll() is None
                log.info("got signal %d: forwarding it to the training group", signum)
                training.signal(signum)

        return {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}

    def _run_until_signalled(self, work: Callable[[], Any]) -> Any:
        """`work()`, abandoned (`Abandoned`) when SIGTERM/SIGINT arrives (`abandon.py`)."""
        return run_until_stopped(work, lambda: self._signalled is not None, name="restore")
