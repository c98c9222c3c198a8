"""Work in another thread that the caller can walk away from: a transfer stuck in a socket
must not keep the final heartbeat from going out when SIGTERM arrives."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")
CANCEL_WAIT_S = 2.0  # after giving up, how long the work may take to stop (most end at once)


class Abandoned(Exception):
    """`stop()` turned true while the work ran; the work goes on in its daemon thread."""


def run_until_stopped(
    work: Callable[[], _T], stop: Callable[[], bool], *, name: str = "work"
) -> _T:
    """`work()`'s result (its exception re-raised here), or `Abandoned` once `stop()` is true."""
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

    threading.Thread(target=run, name=name, daemon=True).start()
    while not done.wait(0.1):
        if stop():
            done.wait(CANCEL_WAIT_S)
            raise Abandoned
    if error:
        raise error[0]
    return result[0]
