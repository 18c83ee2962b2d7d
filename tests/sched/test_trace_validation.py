"""Bad trace rows name their line and field; --skip-bad-rows counts them with reasons; nothing is
dropped silently (jobs larger than the cluster included)."""

import pytest

from wanka.errors import SpecError
from wanka.sched.trace import load_trace

HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
GOOD = "2017-10-01 00:00:00,60,1,60,vc1\n"


def write(tmp_path, body: str, header: str = HEADER):
    p = tmp_path / "t.csv"
    p.write_text(header + body)
    return str(p)


@pytest.mark.parametrize("row, field", [
    ("2017-10-01 00:00:05,abc,1,1,vc1\n", "line 3: duration"),
    ("2017-10-01 00:00:05,60,-2,1,vc1\n", "line 3: num_gpus"),
    ("2017-10-01 00:00:05,60,1.5,1,vc1\n", "line 3: num_gpus"),
    ("2017-10-01 00:00:05,,1,1,vc1\n", "line 3: duration"),
    ("yesterday,60,1,1,vc1\n", "line 3: timestamp"),
    ("2017-10-01 00:00:05,nan,1,1,vc1\n", "line 3: duration"),
])
def test_bad_row_names_line_and_field(tmp_path, row, field):
    with pytest.raises(SpecError) as exc:
        load_trace(write(tmp_path, GOOD + row))
    assert field in str(exc.value)


def test_missing_column(tmp_path):
    with pytest.raises(SpecError, match="duration_s or duration"):
        load_trace(write(tmp_path, "2017-10-01 00:00:00,1,1,vc\n", header="timestamp,num_gpus,gpu_time,cluster\n"))


def test_skip_bad_rows_counts_reasons(tmp_path):
    body = GOOD + "2017-10-01 00:00:05,abc,1,1,vc1\n" + "2017-10-01 00:00:06,60,-2,1,vc1\n" + \
        "2017-10-01 00:00:07,60,4096,1,vc1\n" + "2017-10-01 00:00:08,60,2,1,vc2\n"
    t = load_trace(write(tmp_path, body), cluster_gpus=64, skip_bad_rows=True)
    assert len(t.jobs) == 2 and t.skipped_rows == 3
    assert t.skipped["num_gpus larger than the cluster"] == 1
    assert sum(v for k, v in t.skipped.items() if "duration" in k) == 1
    assert sum(v for k, v in t.skipped.items() if "num_gpus: expected a finite number >= 1" in k) == 1


def test_job_larger_than_cluster_is_an_error_by_default(tmp_path):
    with pytest.raises(SpecError, match="larger than the cluster"):
        load_trace(write(tmp_path, "2017-10-01 00:00:07,60,4096,1,vc1\n"), cluster_gpus=64)


def test_sorted_shifted_and_scaled(tmp_path):
    body = "2017-10-01 00:01:40,60,1,60,vc1\n" + GOOD + "2017-10-01 00:00:40,30,2,60,vc2\n"
    t = load_trace(write(tmp_path, body), scale=2)
    assert [j.submit_s for j in t.jobs] == [0, 20, 50]  # sorted, from 0, inter-arrivals halved
    assert [j.tenant for j in t.jobs] == ["vc1", "vc2", "vc1"]
