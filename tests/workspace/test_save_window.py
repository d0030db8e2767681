"""The save window's pure rules (respot.workspace.serve): how long JupyterLab serves after
the notice, and whether a page is there to save anything."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from respot.commands import contract
from respot.workspace import serve

NOW = datetime(2026, 11, 27, 5, 0, tzinfo=UTC)


def test_the_window_is_as_long_as_the_notice_allows() -> None:
    """EC2's two minutes: the agent kills the group 30 s before the end; the shutdown after
    the window (a snapshot, JupyterLab's stop, the final snapshot) comes before that."""
    window = serve.save_window(reclaim_at=NOW + timedelta(seconds=120), now=NOW, sync_seconds=2.0)
    assert window == 120 - 30 - (serve.STOP_SECONDS + 2 * 2.0)
    # far longer than JupyterLab's autosave interval, however far a slow save stretches it
    # (to 10 times the save's duration): a save of up to ~7 s is covered
    assert window > 10 * 7


def test_the_window_and_the_shutdown_after_it_end_before_the_agent_kills_the_group() -> None:
    for notice in (2.0, 10.0, 20.0, 30.0, 45.0, 120.0):
        for sync in (0.0, 1.0, 5.0, 30.0):
            reclaim = NOW + timedelta(seconds=notice)
            window = serve.save_window(reclaim_at=reclaim, now=NOW, sync_seconds=sync)
            assert window >= 0
            if window > 0:  # a window taken leaves the whole shutdown before the kill
                end = window + serve.shutdown_reserve(sync)
                assert abs(end - contract.seconds_to_kill(reclaim, NOW)) < 1e-9, (notice, sync)
    # a notice too short for the shutdown itself: no window at all
    short = serve.save_window(reclaim_at=NOW + timedelta(seconds=8), now=NOW, sync_seconds=1.0)
    assert short == 0
    # a notice given late (its reclaim instant nearer): the window shrinks by as much
    late = serve.save_window(reclaim_at=NOW + timedelta(seconds=60), now=NOW, sync_seconds=1.0)
    assert late == 60 - 15 - serve.shutdown_reserve(1.0)


def test_a_notice_without_a_time_counts_as_ec2s_two_minutes() -> None:
    assert contract.seconds_to_kill(None, NOW) == 120 - contract.KILL_MARGIN_SECONDS
    at = (NOW + timedelta(seconds=40)).isoformat()
    body: dict[str, str | None] = {"notice": "spot-interruption", "reclaim_at": at}
    assert contract.reclaim_time(body) == NOW + timedelta(seconds=40)
    bad: list[dict[str, str | None]] = [
        {"reclaim_at": None},
        {"reclaim_at": "soon"},
        {"reclaim_at": "2026-11-27T05:00"},
    ]
    for each in bad:
        assert contract.reclaim_time(each) is None  # unreadable or without a zone: EC2's default


def status(started: datetime, last: datetime, connections: int = 0) -> dict[str, object]:
    iso = "%Y-%m-%dT%H:%M:%S.%fZ"
    return {
        "started": started.strftime(iso),
        "last_activity": last.strftime(iso),
        "connections": connections,
        "kernels": 0,
    }


def test_a_page_is_seen_by_its_kernel_connection_or_a_recent_request() -> None:
    start = NOW - timedelta(hours=1)
    # a notebook's kernel websocket, however old the last request
    assert serve.browser_seen(status(start, start, connections=1), [], NOW)
    # a page's request (JupyterLab polls every 10 s) within BROWSER_SEEN_SECONDS
    recent = NOW - timedelta(seconds=serve.BROWSER_SEEN_SECONDS - 5)
    assert serve.browser_seen(status(start, recent), [], NOW)
    # a busy kernel (a cell running) counts too
    kernel = {"execution_state": "busy", "connections": 0, "last_activity": start.isoformat()}
    assert serve.browser_seen(status(start, start), [kernel], NOW)
    # unreadable answers: the window is the safe side
    assert serve.browser_seen(None, [], NOW)


def test_no_page_means_no_window_an_unattended_workspace_is_not_slowed() -> None:
    start = NOW - timedelta(hours=1)
    old = NOW - timedelta(seconds=serve.BROWSER_SEEN_SECONDS + 5)
    assert not serve.browser_seen(status(start, old), [], NOW)
    # Jupyter's last_activity starts at its start: a server nobody asked anything since
    just = NOW - timedelta(seconds=3)
    assert not serve.browser_seen(status(just, just), [], NOW)
