"""`wanka loadtest` against the real server: latency percentiles, 429s counted apart from errors,
overload synchronised on the engine runner (held while the burst arrives), and a bounded soak."""

from __future__ import annotations

import threading

import pytest

from wanka.cli import main
from wanka.serve.loadtest import run_loadtest
from wanka.serve.server import build_state, start_server


def test_loadtest_where_every_request_fails_exits_2_with_the_reason(server, capsys):
    argv = ["loadtest", "--url", server.url, "--concurrency", "1", "--requests", "2", "--max-tokens", "1000",
            "--api-key", "test-key"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--max-tokens" in err and "HTTP 400" in err


@pytest.mark.parametrize("args,field", [(["--duration", "-1"], "--duration"), (["--duration", "0"], "--duration")])
def test_bad_duration_exits_2(server, args, field, capsys):
    assert main(["loadtest", "--url", server.url, "--api-key", "test-key", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{field}: expected a positive number of seconds" in err


def test_within_capacity_nothing_is_rejected(tiny_dir):
    """4 workers, each with one request in flight, never exceed 2 running + 2 waiting places."""
    with start_server(build_state(tiny_dir, max_batch=2, max_queue=2)) as srv:
        level = run_loadtest(srv.url, [4], 12, max_tokens=4)["levels"][0]
    assert (level["ok"], level["rejected"], level["errors"]) == (12, 0, 0)
    assert level["completion_tokens"] == 48
    assert 0 < level["ttft_p50_s"] <= level["latency_p99_s"] and level["latency_p50_s"] <= level["latency_p99_s"]


def test_overload_is_429s_never_errors_or_a_hang(tiny_dir):
    """16 workers against 2 running + 2 waiting places, the engine held while they arrive: exactly 4
    requests are taken, the other 36 of 40 are refused at once with 429, and once released the 4
    finish; no 5xx, no broken stream."""
    state = build_state(tiny_dir, max_batch=2, max_queue=2)
    with start_server(state) as srv:
        state.runner.hold()
        out = {}
        thread = threading.Thread(target=lambda: out.update(run_loadtest(srv.url, [16], 40, max_tokens=4)))
        thread.start()
        assert state.runner.wait_until(lambda r: r.rejected == 36 and r.in_flight == 4)
        state.runner.release()
        thread.join(300)
    level = out["levels"][0]
    assert (level["ok"], level["rejected"], level["errors"]) == (4, 36, 0)
    assert level["first_error"].startswith("HTTP 429")


def test_duration_bounds_a_level(tiny_dir):
    with start_server(build_state(tiny_dir, max_batch=4)) as srv:
        level = run_loadtest(srv.url, [2], None, max_tokens=2, duration_s=0.2)["levels"][0]
    assert level["requests"] >= 2 and level["errors"] == 0 and level["ok"] == level["requests"]


@pytest.mark.slow
def test_soak_64_concurrent_streams_has_no_errors(tiny_dir):
    """The soak of benchmarks/serve_soak.py, bounded by a request count: 64 streams at once."""
    with start_server(build_state(tiny_dir)) as srv:
        level = run_loadtest(srv.url, [64], 256, max_tokens=16)["levels"][0]
    assert (level["ok"], level["rejected"], level["errors"]) == (256, 0, 0)
    assert level["completion_tokens"] == 256 * 16
