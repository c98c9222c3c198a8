"""The cold-start bench imports each handler in its function's environment: the functions the
stack deploys untraced with the tracer off (bench/cold_start.py)."""

from __future__ import annotations

from bench.cold_start import HANDLER_SETTINGS, UNTRACED_ENV, function_env
from infra import names


def test_untraced_functions_are_imported_with_the_tracer_off() -> None:
    for name, handler in HANDLER_SETTINGS.items():
        env = function_env(name)
        off = env.get("POWERTOOLS_TRACE_DISABLED") == UNTRACED_ENV["POWERTOOLS_TRACE_DISABLED"]
        assert off is (handler in names.UNTRACED_HANDLERS), name
    assert "POWERTOOLS_TRACE_DISABLED" in function_env("heartbeat")
    assert "POWERTOOLS_TRACE_DISABLED" not in function_env("jobs")
