"""The local stack's servers when a client hangs up (a host destroyed mid-request, a CLI
interrupted, `curl … | head`): the connection ends quietly, logged at debug, with no
traceback on the terminal; an error of the server's own still prints one."""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from tether_local.http import LoopbackServer
from tether_local.r2.front import R2Front

WAIT_S = 30.0
BIG_BODY = b"x" * (16 * 1024 * 1024)  # more than any socket buffer holds


def reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a killed process's connection can end."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def wait_until(what: str, probe: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def hung_up(caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> str:
    """Wait until the server has dealt with the hang-up, one way or the other: the debug line
    (quiet) or socketserver's report on stderr. What stderr got."""
    err = ""

    def dealt_with() -> bool:
        nonlocal err
        err += capsys.readouterr().err
        return "hung up" in caplog.text or "Exception occurred" in err

    wait_until("the server to see the hang-up", dealt_with)
    time.sleep(0.2)  # anything else it was about to print
    return err + capsys.readouterr().err


def test_a_client_that_resets_mid_response_is_no_traceback(caplog, capsys) -> None:
    called, answer = threading.Event(), threading.Event()

    def slow_big(_request: httpx.Request) -> httpx.Response:
        called.set()
        answer.wait(WAIT_S)
        return httpx.Response(200, content=BIG_BODY)

    caplog.set_level(logging.DEBUG, logger="tether_local.http")
    with LoopbackServer(slow_big, name="hangup") as server:
        client = socket.create_connection(("127.0.0.1", server.port))
        client.sendall(b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert called.wait(WAIT_S)
        reset(client)  # gone before the answer is written
        answer.set()
        err = hung_up(caplog, capsys)
    assert "Traceback" not in err and "Exception occurred" not in err
    assert "hung up" in caplog.text


def test_a_client_that_resets_before_its_request_line_is_no_traceback(caplog, capsys) -> None:
    caplog.set_level(logging.DEBUG, logger="tether_local.r2.front")
    with R2Front("http://127.0.0.1:9", lambda _key: None) as front:
        client = socket.create_connection(("127.0.0.1", front.port))
        client.sendall(b"GET /tether/x HTTP/1.1\r\n")  # the request line, then nothing
        time.sleep(0.1)
        reset(client)
        err = hung_up(caplog, capsys)
    assert "Traceback" not in err and "Exception occurred" not in err
    assert "client" in caplog.text and "hung up" in caplog.text


def test_a_server_error_still_prints_its_traceback(capsys) -> None:
    """Not every error of a connection's thread is a hang-up: a bug in answering still shows."""

    def body() -> Iterator[bytes]:
        raise ValueError("a body that cannot be read")
        yield b""

    def unanswerable(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body())

    with LoopbackServer(unanswerable, name="hangup-bug") as server:
        client = socket.create_connection(("127.0.0.1", server.port))
        client.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        err = ""

        def reported() -> bool:
            nonlocal err
            err += capsys.readouterr().err
            return "Traceback" in err

        wait_until("the server's traceback", reported)
        client.close()
    assert "Exception occurred during processing of request" in err
