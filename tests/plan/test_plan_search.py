"""Search returns fitting layouts, fastest first, no slower than any layout it could have chosen."""

import pytest

from wanka.cluster import load_cluster
from wanka.errors import SpecError
from wanka.layout import Layout
from wanka.plan import SearchStats, estimate, search, whole_run
from wanka.workload import load_model


def test_search_ranks_fitting_layouts():
    m = load_model("llama3-8b")
    c = load_cluster("wanka-10k", gpus=64)
    stats = SearchStats()
    top = search(m, c, gbs=256, top=5, stats=stats)
    assert 1 <= len(top) <= 5 and all(e.fits for e in top)
    times = [e.step_time_s for e in top]
    assert times == sorted(times)
    assert stats.evaluated >= stats.timed >= len(top)
    hand = estimate(m, c, Layout.parse("tp=8,pp=1,gbs=256,zero=1"))
    assert top[0].step_time_s <= hand.step_time_s


def test_nothing_fits_is_a_spec_error():
    with pytest.raises(SpecError):
        search(load_model("llama3-405b"), load_cluster("wanka-10k", gpus=8), gbs=8)


def test_whole_run_arithmetic():
    m = load_model("llama3-8b")
    c = load_cluster("wanka-10k", gpus=64)
    e = estimate(m, c, Layout.parse("tp=8,gbs=256"))
    run = whole_run(e, 1e12, c)
    assert run["days"] == pytest.approx(1e12 / e.tokens_per_s / 86400)
    assert run["gpu_hours"] == pytest.approx(run["days"] * 24 * 64)
    assert run["energy_MWh"] > 0 and run["cost_usd"] == pytest.approx(run["energy_MWh"] * 1000 * c.spec.power.electricity_usd_per_kWh)
