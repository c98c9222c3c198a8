"""`tether jobs` reads the job list page by page (tether_cli/jobs.py `read_jobs`): a state that
is rare in a long history comes back as short or empty pages with a token, so the reader follows
the tokens up to `--limit`, and says how far it got after each request (the terminal's progress
line)."""

from __future__ import annotations

from typing import Any

from tether_cli.jobs import JOBS_PAGE, read_jobs


class PagedApi:
    """`list_jobs` answering from a fixed list of pages (jobs, next token), in order."""

    def __init__(self, pages: list[tuple[list[str], str | None]]) -> None:
        self.pages = pages
        self.asked: list[dict[str, Any]] = []

    def list_jobs(self, *, state: str | None, limit: int, next_token: str | None) -> Any:
        self.asked.append({"state": state, "limit": limit, "next_token": next_token})
        jobs, token = self.pages[len(self.asked) - 1]
        return {"jobs": [{"job_id": j} for j in jobs], "next": token}


def test_empty_pages_with_a_token_are_followed_and_each_request_is_told() -> None:
    api = PagedApi([([], "t1"), ([], "t2"), (["a"], "t3"), (["b", "c"], None)])
    told: list[tuple[int, int]] = []
    found, token = read_jobs(
        api, state="RUNNING", limit=50, on_request=lambda r, n: told.append((r, n))
    )
    assert [j["job_id"] for j in found] == ["a", "b", "c"] and token is None
    assert told == [(1, 0), (2, 0), (3, 1), (4, 3)]
    assert [a["next_token"] for a in api.asked] == [None, "t1", "t2", "t3"]
    assert all(a["state"] == "RUNNING" for a in api.asked)


def test_the_reading_stops_at_the_limit_with_the_token_to_go_on_from() -> None:
    api = PagedApi([(["a", "b"], "t1"), (["c"], "t2")])
    found, token = read_jobs(api, state=None, limit=3)
    assert len(found) == 3 and token == "t2"
    assert [a["limit"] for a in api.asked] == [3, 1]
    big = PagedApi([([], None)])
    read_jobs(big, state=None, limit=1000)
    assert big.asked[0]["limit"] == JOBS_PAGE
