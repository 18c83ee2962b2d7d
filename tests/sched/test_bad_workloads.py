"""Workloads that cannot be replayed meaningfully (empty, binary, impossible topology) are one-line errors."""

import json

import pytest

from wanka.cli import main
from wanka.errors import SpecError
from wanka.sched import Job, Scheduler
from wanka.sched.trace import load_trace


def one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def test_header_only_trace_is_an_error(tmp_path):
    # zero jobs would replay to a table of nulls; an empty trace is an input error
    p = tmp_path / "t.csv"
    p.write_text("submit_s,duration_s,gpus\n")
    with pytest.raises(SpecError, match="at least one job row"):
        load_trace(str(p))


def test_trace_whose_rows_are_all_skipped_is_an_error(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("submit_s,duration_s,gpus\n0,10,999\n")
    with pytest.raises(SpecError, match="1 rows was skipped"):
        load_trace(str(p), cluster_gpus=64, skip_bad_rows=True)


def test_binary_trace_is_an_error_not_a_traceback(tmp_path, capsys):
    # undecodable bytes are named as the file's problem, not raised as UnicodeDecodeError
    p = tmp_path / "t.csv"
    p.write_bytes(b"\xff\xfe\x00\x01")
    err = one_line_error(capsys, ["sched", "replay", "--trace", str(p), "--gpus", "64"])
    assert "t.csv" in err and "UTF-8" in err


def test_negative_seed_is_an_error(capsys):
    # the seed is checked by wanka before numpy sees it
    assert "--seed" in one_line_error(capsys, ["sched", "replay", "--trace", "synthetic", "--jobs", "5", "--seed", "-1"])


def test_report_path_is_checked_before_replaying(capsys, tmp_path):
    # the report path is checked before any policy runs, so a bad path costs no replay time
    err = one_line_error(capsys, ["sched", "compare", "--trace", "synthetic", "--jobs", "5", "--report", str(tmp_path)])
    assert "--report" in err


@pytest.mark.parametrize("topology, gpus, ok", [("scale-up", 4, True), ("scale-up", 8, False),
                                                 ("leaf", 16, True), ("leaf", 32, False),
                                                 ("spine", 32, True), ("spine", 64, False)])
def test_topology_request_larger_than_its_unit_is_rejected(tiny4, topology, gpus, ok):
    # tiny4: scale-up domains of 4 GPUs, leaves of 16, spine blocks of 32. A job asking for a unit that
    # cannot hold it could never start, so it is refused at submission instead of waiting forever
    s = Scheduler(tiny4)
    job = Job("j", gpus=gpus, submit_s=0, duration_s=10, topology=topology)
    if ok:
        s.submit(job, 0.0)
        assert s.schedule(0.0)  # it starts
    else:
        with pytest.raises(SpecError) as exc:
            s.submit(job, 0.0)
        assert exc.value.field == "job 'j'.topology"


def test_trace_row_with_impossible_topology_names_the_row(capsys, tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("submit_s,duration_s,gpus,topology\n0,100,8,scale-up\n0,100,16,scale-up\n")
    err = one_line_error(capsys, ["sched", "replay", "--trace", str(p), "--gpus", "64"])
    assert "t.csv:3" in err and "topology" in err
    p.write_text("submit_s,duration_s,gpus,topology\n0,100,8,scale-up\n")
    assert main(["sched", "replay", "--trace", str(p), "--gpus", "64", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["finished"] == 1


def test_bare_sched_is_one_stderr_line(capsys):
    # a usage error is one stderr line, not help text on stdout
    assert main(["sched"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.strip().splitlines()) == 1 and "replay | compare" in out.err
