"""Uploads each marked local checkpoint under this generation's prefix, then applies retention
to this generation's checkpoints only.

Watching uses inotify through watchdog (a polling observer where inotify is unavailable) plus a
slow periodic rescan as a safety net, so an idle agent sleeps. A checkpoint directory is never
read before its marker file exists (a single-file checkpoint: before its sibling marker, see
`checkpoints.py`). Files go up in parallel, largest first (the longest file
sets the pace); the manifest (sizes and sha256 of the bytes actually sent) is written last, and
only then are older remote checkpoints deleted.

Retention does not list the bucket per checkpoint: this generation's prefix is written by this
agent alone, so one listing at start (`adopt_remote`, or the first retention) plus every key
this process tries to write is the whole of it (`_RemoteIndex`). Listing the generation's
checkpoints took 0.2–1.8 s per 128 MiB checkpoint on the local stack, as long as the data.

A checkpoint the storage refuses as out of scope (403 `AccessDenied`) is reported once through
`on_refused` and not tried again with the same credentials: only newer credentials (a heartbeat
reply) make it worth another try. Expired credentials are not a refusal: the storage layer
waits for fresh ones.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.polling import PollingObserver

from tether_agent.checkpoints import (
    MANIFEST_NAME,
    Manifest,
    ManifestFile,
    RemoteCheckpointId,
    checkpoints_prefix,
    name_problem,
    parse_remote_dir,
    retention_victims,
    sibling_marker_name,
)
from tether_agent.progress import marked_checkpoints
from tether_agent.protocol import CheckpointRef
from tether_agent.storage import AccessDenied, Storage, StorageError, TransferCancelled

log = logging.getLogger(__name__)


class _MarkerHandler(FileSystemEventHandler):
    def __init__(self, marker: str, on_marker: Callable[[], None]) -> None:
        self._marker = marker
        self._sibling_suffix = sibling_marker_name("", marker)  # a file checkpoint's marker
        self._on_marker = on_marker

    def on_any_event(self, event: FileSystemEvent) -> None:
        paths = [str(event.src_path), str(getattr(event, "dest_path", "") or "")]
        names = [Path(p).name for p in paths if p]
        if any(n == self._marker or n.endswith(self._sibling_suffix) for n in names):
            self._on_marker()


class _RemoteIndex:
    """This generation's checkpoint directories in the bucket: every key in each (listed at
    start, or attempted since: a failed try may have left some) and which have a manifest."""

    def __init__(self) -> None:
        self.keys: dict[RemoteCheckpointId, set[str]] = {}
        self.complete: set[RemoteCheckpointId] = set()

    def add_listing(self, root: str, generation: int, keys: list[str]) -> None:
        for key in keys:
            dirname, _, rest = key.removeprefix(root).partition("/")
            step = parse_remote_dir(dirname)
            if step is None:
                continue
            cid = RemoteCheckpointId(step, generation)
            self.keys.setdefault(cid, set()).add(key)
            if rest == MANIFEST_NAME:
                self.complete.add(cid)

    def forget(self, cid: RemoteCheckpointId) -> None:
        self.keys.pop(cid, None)
        self.complete.discard(cid)


class CheckpointUploader:
    def __init__(
        self,
        storage: Storage,
        checkpoint_dir: Path,
        marker: str,
        generation: int,
        keep_last: int,
        *,
        file_concurrency: int = 4,
        prune_local: bool = False,
        poll_interval_s: float = 30.0,
        on_uploaded: Callable[[CheckpointRef], None] | None = None,
        on_refused: Callable[[int, AccessDenied], None] | None = None,
    ) -> None:
        self.storage = storage
        self.checkpoint_dir = checkpoint_dir
        self.marker = marker
        self.generation = generation
        self.keep_last = keep_last
        self.prune_local = prune_local
        self.poll_interval_s = poll_interval_s
        self.last: CheckpointRef | None = None
        self.last_upload_s: float | None = None  # the last upload's seconds (heartbeats report it)
        self._on_uploaded = on_uploaded
        self._on_refused = on_refused
        self._done_steps: set[int] = set()
        self._remote_floor = -1  # adopt_remote(): local steps up to this one are in the bucket
        self._refused: dict[int, int] = {}  # step → credentials version that was refused
        self._lock = threading.Lock()  # one scan at a time (watcher thread vs final flush)
        self._index: _RemoteIndex | None = None  # None until listed once
        self._files = ThreadPoolExecutor(max_workers=file_concurrency, thread_name_prefix="s3-file")
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._observer: Observer | PollingObserver | None = None  # type: ignore[valid-type]
        self._thread = threading.Thread(target=self._loop, name="uploader", daemon=True)

    def already_remote(self, step: int, ref: CheckpointRef | None = None) -> None:
        """A local checkpoint that came from the bucket (restored): never upload it again."""
        self._done_steps.add(step)
        if ref is not None:
            self.last = ref

    def adopt_remote(self) -> list[int]:
        """This generation's checkpoints already complete in the bucket: never uploaded again.
        A generation starts again on its own disk when its interruptible host wins its machine
        back after an outbid; uploading its old local checkpoints again would rewrite manifests
        the control plane recorded (and retention deleted the older ones on purpose). Storage
        that cannot be listed adopts nothing (they may be uploaded again, as before)."""
        try:
            index = self._listed_index()
        except StorageError as exc:
            log.warning("cannot list this generation's checkpoints: %s", exc)
            return []
        steps = [cid.step for cid in index.complete]
        self._done_steps.update(steps)
        self._remote_floor = max(steps, default=-1)
        return sorted(steps)

    def start(self) -> None:
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        handler = _MarkerHandler(self.marker, self._wake.set)
        try:
            observer = Observer()
            observer.schedule(handler, str(self.checkpoint_dir), recursive=True)
            observer.start()
        except OSError as exc:  # no inotify (limits, some container runtimes)
            log.warning("inotify unavailable (%s); polling the checkpoint dir", exc)
            observer = PollingObserver(timeout=self.poll_interval_s)
            observer.schedule(handler, str(self.checkpoint_dir), recursive=True)
            observer.start()
        self._observer = observer
        self._thread.start()

    def stop_watching(self) -> None:
        """Stop the watcher; an upload in progress finishes (or is cancelled by the storage)."""
        self._stop.set()
        self._wake.set()
        if self._observer is not None:
            self._observer.stop()
        if self._thread.is_alive():
            self._thread.join()

    def close(self) -> None:
        self._files.shutdown(wait=False, cancel_futures=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.poll_interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.upload_pending()
            except TransferCancelled:
                return
            except Exception:  # the watcher must outlive any one bad checkpoint
                log.exception("checkpoint upload failed; will retry on the next marker or scan")

    def upload_pending(self) -> list[CheckpointRef]:
        """Upload every marked checkpoint not uploaded yet, oldest first."""
        uploaded: list[CheckpointRef] = []
        with self._lock:
            for step, path in marked_checkpoints(self.checkpoint_dir, self.marker):
                if step in self._done_steps or (self.last and step < self.last.step):
                    continue
                if step <= self._remote_floor:
                    continue  # adopted: in the bucket already (or deleted by retention)
                version = self.storage.store.current().version
                if self._refused.get(step) == version:
                    continue  # refused with these credentials: wait for newer ones
                started = time.monotonic()
                try:
                    ref = self._upload_checkpoint(step, path)
                except AccessDenied as exc:
                    self._refused[step] = version
                    log.error("checkpoint %d not uploaded: %s", step, exc)
                    if self._on_refused:
                        self._on_refused(step, exc)
                    break  # the next ones go to the same prefix: same answer
                if ref is None:
                    continue
                self.last_upload_s = time.monotonic() - started
                uploaded.append(ref)
                self._after_upload(ref, path)
        return uploaded

    def _upload_checkpoint(self, step: int, path: Path) -> CheckpointRef | None:
        cid = RemoteCheckpointId(step, self.generation)
        is_file = path.is_file()
        files = [path] if is_file else sorted(p for p in path.rglob("*") if p.is_file())
        base = cid.dir_key(self.storage.prefix)
        log.info("uploading checkpoint %s (%d files) to %s", path.name, len(files), base)
        relative = [path.name] if is_file else [f.relative_to(path).as_posix() for f in files]
        if MANIFEST_NAME in relative:
            log.error("%s contains a file named %s; skipped", path, MANIFEST_NAME)
            self._done_steps.add(step)
            return None
        name: str | None = path.name
        if problem := name_problem(path.name, step):  # a restore would refuse it
            if is_file:
                log.error("checkpoint file %s not uploaded: %s", ascii(path.name), problem)
                self._done_steps.add(step)
                return None
            log.warning("%s; it will be restored as checkpoint-%d", problem, step)
            name = None
        if self._index is not None:  # anything tried may land, even if this try fails
            self._index.keys.setdefault(cid, set()).update(base + rel for rel in relative)
            self._index.keys[cid].add(cid.manifest_key(self.storage.prefix))
        sizes = {f: f.stat().st_size for f in files}
        futures = {
            rel: self._files.submit(self.storage.upload_file, f, base + rel)
            for f, rel in sorted(zip(files, relative, strict=True), key=lambda fr: -sizes[fr[0]])
        }  # largest first: with a few files in flight, the biggest one sets the finish
        try:
            results = [futures[rel].result() for rel in relative]
        except FileNotFoundError:
            # The script deleted it meanwhile (e.g. Trainer's save_total_limit): not an error.
            log.warning("checkpoint %s vanished while uploading; skipped", path.name)
            self._done_steps.add(step)
            return None
        except BaseException:
            for f in futures.values():
                f.cancel()
            raise
        manifest = Manifest(
            step=step,
            generation=self.generation,
            created_at=datetime.now(UTC),
            files=[
                ManifestFile(path=rel, size=size, sha256=sha)
                for rel, (size, sha) in zip(relative, results, strict=True)
            ],
            name=name,
            kind="file" if is_file else "directory",
        )
        key, sha256 = self.storage.put_manifest(cid, manifest)  # last: now it exists
        if self._index is not None:
            self._index.complete.add(cid)
        self._done_steps.add(step)
        return CheckpointRef(
            step=step, generation=self.generation, manifest_key=key, manifest_sha256=sha256
        )

    def _after_upload(self, ref: CheckpointRef, path: Path) -> None:
        self.last = ref
        log.info("checkpoint %d uploaded (%s)", ref.step, ref.manifest_key)
        if self._on_uploaded:
            self._on_uploaded(ref)
        try:
            self.apply_retention()
        except StorageError as exc:
            log.warning("retention skipped this time: %s", exc)
        if self.prune_local:
            self._prune_local(keep=path)

    def apply_retention(self) -> list[RemoteCheckpointId]:
        """Delete this generation's checkpoints beyond the newest `keep_last` complete ones.
        Older generations' checkpoints are outside this generation's key and stay. Lists the
        bucket only the first time (see the module docstring); a delete is two calls."""
        index = self._listed_index()
        victims = retention_victims(
            list(index.keys), index.complete, self.generation, self.keep_last
        )
        for cid in victims:
            log.info("retention: deleting remote checkpoint %s", cid.dir_key(self.storage.prefix))
            self.storage.delete_checkpoint(cid, index.keys[cid])
            index.forget(cid)
        return victims

    def _listed_index(self) -> _RemoteIndex:
        if self._index is None:
            root = checkpoints_prefix(self.storage.prefix, self.generation)
            index = _RemoteIndex()
            index.add_listing(root, self.generation, self.storage.list_keys(root))
            self._index = index
        return self._index

    def _prune_local(self, keep: Path) -> None:
        """Delete local checkpoints that are safely remote, except the newest one."""
        for step, path in marked_checkpoints(self.checkpoint_dir, self.marker):
            if path != keep and step in self._done_steps and self.last and step < self.last.step:
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                path.unlink(missing_ok=True)  # the file, then its marker
                (path.parent / sibling_marker_name(path.name, self.marker)).unlink(missing_ok=True)
