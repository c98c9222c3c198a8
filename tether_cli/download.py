"""`tether download JOB (--outputs | --checkpoint STEP) [--to DIR]`: a job's outputs or one of its
recorded checkpoints, fetched through presigned URLs from the jobs API (`GET /jobs/{id}/files`),
each file checked against the size and sha256 its manifest lists.

Nothing is written before the API has said what to fetch (an unknown job, step or missing
outputs exits 2 with the API's reason). Each file goes to a `.part` file in the target directory
and is renamed into place only once its sha256 matches; a mismatch deletes it and exits 1. An
existing file with the same path is replaced only once its replacement has verified. A
progress bar (rich, on stderr) counts bytes; `--json` prints the list of files written.

A manifest is written by a rented host, so a file name may hold control characters (an escape
sequence that `ls` would print to the terminal, a newline that splits a shell loop). Such a file
is saved under its name as `tether_cli.terminal_text.visible` shows it (ESC as the four
characters `\\x1b`), said on stderr and as `saved_as` in `--json`; its bytes are unchanged.

A checkpoint's manifest names how the training script saved it (`name`, `kind`): a folder, whose
files land in DIR, or a single file (Lightning's `epoch=0-step=50.ckpt`), which lands in DIR
under that name.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path, PurePosixPath
from typing import Any

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from tether_cli import jobs as cli_jobs
from tether_cli import output
from tether_cli.api_client import TetherApi
from tether_cli.output import EXIT_FAILURE, EXIT_OK, CliError
from tether_cli.terminal_text import visible

MAX_URL_REFRESHES = 3  # per file: a fresh listing brings freshly signed URLs


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = cli_jobs._add(
        subparsers,
        "download",
        "fetch a job's outputs or a recorded checkpoint, verified",
        "Download a job's outputs (--outputs) or one of its recorded checkpoints "
        "(--checkpoint STEP) into DIR, checking every file's sha256 against its manifest.",
    )
    parser.add_argument("job_id", metavar="JOB", help="the job id")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--outputs", action="store_true", help="the job's outputs dir")
    what.add_argument(
        "--checkpoint", type=_step, metavar="STEP", help="the recorded checkpoint at STEP"
    )
    parser.add_argument(
        "--to",
        type=Path,
        metavar="DIR",
        help="where to put the files (default ./<job>-outputs or ./<job>-checkpoint-<step>)",
    )
    parser.set_defaults(handler=run_download)


def _step(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a step number, e.g. 500") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def run_download(args: argparse.Namespace) -> int:
    with cli_jobs.connect(args) as api:
        first = api.job_files(args.job_id, outputs=args.outputs, checkpoint=args.checkpoint)
        default = f"{args.job_id}-outputs" if args.outputs else f"{args.job_id}-checkpoint-"
        target: Path = args.to or Path(default + ("" if args.outputs else str(args.checkpoint)))
        written = fetch_all(api, args, first, target, quiet=args.json)
    if args.json:
        output.print_json(
            {
                "job_id": args.job_id,
                "what": first["what"],
                "step": first["step"],
                "generation": first["generation"],
                "manifest_key": first["manifest_key"],
                "name": first.get("name"),  # an older API sends neither
                "kind": first.get("kind", "directory"),
                "to": str(target),
                "files": written,
            }
        )
    else:
        total = sum(f["size"] for f in written)
        output.stdout_console().print(
            f"downloaded {len(written)} files ({total} bytes) to {target}, every sha256 verified"
            + _saved_as(first)
        )
    return EXIT_OK


def _saved_as(listing: dict[str, Any]) -> str:
    """How the training script saved a checkpoint, when its manifest says: its name, and
    whether it is a single file (then it is the one file written, under that name)."""
    name = listing.get("name")
    if listing.get("what") != "checkpoint" or not isinstance(name, str):
        return ""
    shown = visible(name, keep_newlines=False)
    if listing.get("kind") == "file":
        return f"; the checkpoint is the single file {shown}"
    return f"; the checkpoint was saved as the folder {shown}"


def fetch_all(
    api: TetherApi, args: argparse.Namespace, first: dict[str, Any], target: Path, *, quiet: bool
) -> list[dict[str, Any]]:
    written: list[dict[str, Any]] = []
    columns = (
        TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn()
    )  # fmt: skip
    progress = Progress(*columns, console=output.stderr_console(), disable=quiet)
    target.mkdir(parents=True, exist_ok=True)
    with progress:
        task = progress.add_task("downloading", total=first["total_bytes"])
        page: dict[str, Any] | None = first
        while page is not None:
            for entry in page["files"]:
                relative = saved_path(entry["path"])
                _fetch_one(api, args, entry, target / relative, lambda n: progress.advance(task, n))
                record = {k: entry[k] for k in ("path", "size", "sha256")}
                if str(relative) != entry["path"]:
                    record["saved_as"] = str(relative)
                    if not quiet:
                        output.warn(
                            f"{visible(entry['path'], keep_newlines=False)}: its name holds "
                            f"control characters; saved as {relative}"
                        )
                written.append(record)
            offset = page["next_offset"]
            page = None
            if offset is not None:
                page = api.job_files(
                    args.job_id, outputs=args.outputs, checkpoint=args.checkpoint, offset=offset
                )
    return written


def saved_path(path: str) -> PurePosixPath:
    """Where a manifest's `path` is saved, relative to the target: the path itself, with any
    control character in it written out as `visible` shows it. The API refuses a manifest path
    with a backslash, so a rewritten name (which has one) never meets another file's. Raises
    CliError for a path that would leave the target."""
    relative = PurePosixPath(path)
    if relative.is_absolute() or ".." in relative.parts:
        raise CliError(f"refusing the unsafe path {path!r} in the manifest", EXIT_FAILURE)
    return PurePosixPath(*(visible(part, keep_newlines=False) for part in relative.parts))


def _fetch_one(
    api: TetherApi,
    args: argparse.Namespace,
    entry: dict[str, Any],
    dest: Path,
    on_bytes: Any,
) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    url = entry["url"]
    try:
        for _ in range(MAX_URL_REFRESHES):
            with part.open("wb") as out:
                sha256 = api.stream_to(url, out, on_bytes)
            if sha256 is not None:
                break
            url = _fresh_url(api, args, entry["path"])  # expired: list that page again
        else:
            raise CliError(f"{entry['path']}: its download URL is refused", EXIT_FAILURE)
        size = part.stat().st_size
        if (size, sha256) != (entry["size"], entry["sha256"]):
            raise CliError(
                f"{entry['path']}: got {size} bytes with sha256 {sha256}, the manifest says "
                f"{entry['size']} bytes with sha256 {entry['sha256']}; nothing kept",
                EXIT_FAILURE,
            )
        part.replace(dest)
    finally:
        with contextlib.suppress(FileNotFoundError):
            part.unlink()


def _fresh_url(api: TetherApi, args: argparse.Namespace, path: str) -> str:
    offset = 0
    while True:
        again = api.job_files(
            args.job_id, outputs=args.outputs, checkpoint=args.checkpoint, offset=offset
        )
        for entry in again["files"]:
            if entry["path"] == path:
                return str(entry["url"])
        if again["next_offset"] is None:
            raise CliError(f"{path} is no longer listed", EXIT_FAILURE)
        offset = again["next_offset"]
