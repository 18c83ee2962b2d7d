"""Young and Daly (reliability.md 3.2, S7 test points) and the checkpoint schedule's closed forms."""

import pytest

from wanka.reliability import CheckpointSchedule, daly_exact_interval, daly_interval, young_interval

DELTA, R = 5 * 60.0, 10 * 60.0  # Daly's figures 3-5: delta = 5 min, R = 10 min


@pytest.mark.parametrize("mtbf_min, young_min, daly_min, exact_min", [
    (24 * 60, 120.0, 116.69, 116.69),
    (6 * 60, 60.0, 56.71, 56.71),
    (15, 12.25, 9.14, 9.17),
])
def test_young_daly_published_points(mtbf_min, young_min, daly_min, exact_min):
    m = mtbf_min * 60.0
    assert young_interval(DELTA, m) / 60 == pytest.approx(young_min, abs=0.01)
    assert daly_interval(DELTA, m) / 60 == pytest.approx(daly_min, abs=0.01)
    assert daly_exact_interval(DELTA, m, R) / 60 == pytest.approx(exact_min, abs=0.01)


def test_daly_published_rounding_and_large_delta():
    assert round(daly_interval(DELTA, 24 * 3600) / 60) == 117  # "117 min" as printed
    assert round(daly_interval(DELTA, 6 * 3600) / 60) == 57
    assert round(daly_interval(DELTA, 15 * 60) / 60, 1) == 9.1
    assert daly_interval(100.0, 40.0) == 40.0  # delta >= 2M -> tau = M


def test_sync_schedule_closed_form():
    s = CheckpointSchedule(tau_s=100.0, stall_s=10.0)
    assert s.compute_done(105.0) == 100.0  # inside the first stall
    assert s.compute_done(250.0) == 230.0  # two cycles (220 s wall, 200 s compute) + 30 s compute
    assert s.durable(109.0) == (0.0, 0.0)
    assert s.durable(110.0) == (100.0, 100.0)  # durable when the stall ends


def test_async_storage_lags_by_write_time():
    s = CheckpointSchedule(tau_s=100.0, stall_s=1.0, sto_lag_s=50.0)
    assert s.durable(150.0)[1] == 0.0
    assert s.durable(151.0)[1] == 100.0


def test_two_level_schedule():
    s = CheckpointSchedule(tau_s=10.0, stall_s=1.0, every=5, extra_stall_s=4.0, has_memory=True)
    # 5 snapshots per super-cycle of 5*11 + 4 = 59 s; the 5th also goes to storage (4 s more)
    assert s.durable(33.0) == (30.0, 0.0)
    assert s.durable(58.0) == (40.0, 0.0)
    assert s.durable(59.0) == (50.0, 50.0)
    assert s.compute_done(59.0) == 50.0


@pytest.mark.parametrize("sched", [CheckpointSchedule(tau_s=100.0, stall_s=10.0),
                                   CheckpointSchedule(tau_s=10.0, stall_s=1.0, every=5, extra_stall_s=4.0, has_memory=True)])
def test_wall_for_compute_inverts_compute_done(sched):
    for c in (0.0, 5.0, 10.0, 37.5, 100.0, 250.0, 1234.5):
        e = sched.wall_for_compute(c)
        assert sched.compute_done(e) == pytest.approx(c)
        assert sched.compute_done(e - 1e-6) < c or c == 0
