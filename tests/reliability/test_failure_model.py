"""Failure model: rates derived from the taxonomy's sources, and Poisson arrivals within bounds."""

import math

import numpy as np
import pytest

from wanka.errors import SpecError
from wanka.reliability import build_failure_model, failure_model_names, load_failure_model


def test_llama3_taxonomy_reproduces_table5_rate():
    fm = load_failure_model("llama3-h100")
    # Llama 3 Table 5: 419 unexpected interruptions in 54 days on 16,384 GPUs -> job MTBF 3.09 h
    assert fm.rate_per_hour(16384, 8) * 54 * 24 == pytest.approx(419, rel=1e-9)
    assert fm.mtbf_h(16384, 8) == pytest.approx(3.093, abs=1e-3)
    per_cause = dict(zip([c.name for c in fm.causes], fm.rates_per_hour(16384, 8) * 54 * 24))
    assert per_cause["faulty_gpu"] == pytest.approx(148)
    assert per_cause["gpu_hbm3"] == pytest.approx(72)
    # GPU-attributed per GPU-year: 268 events -> 0.111 (reliability.md 1.1)
    gpu = sum(r for r, c in zip(fm.rates_per_hour(1, 8), fm.causes) if c.unit == "gpu" and c.component != "software" and c.component != "unknown")
    assert gpu * 24 * 365 == pytest.approx(0.111, abs=0.001)


def test_rsc1_projected_mttf():
    fm = load_failure_model("rsc1")
    assert fm.mtbf_h(16384, 8) == pytest.approx(1.80, abs=0.01)  # Kokolis projection, 2,048 nodes
    assert fm.mtbf_h(131072, 8) * 60 == pytest.approx(13.5, abs=0.1)  # "~14 min" at 16,384 nodes


def test_poisson_counts_within_bounds():
    fm = load_failure_model("llama3-h100")
    rng = np.random.default_rng(0)
    counts = np.array([len(fm.draw(rng, 54 * 24, 16384, 8)[0]) for _ in range(400)])
    lam = 419.0
    assert abs(counts.mean() - lam) < 4 * math.sqrt(lam / len(counts))  # mean within 4 standard errors
    assert 0.8 < counts.var(ddof=1) / lam < 1.2  # Poisson: variance = mean (chi2 bound at n=400)


def test_cause_mix_is_multinomial():
    fm = load_failure_model("llama3-h100")
    rng = np.random.default_rng(1)
    times, causes = fm.draw(rng, 54 * 24 * 200, 16384, 8)
    assert np.all(np.diff(times) >= 0) and times.max() < 54 * 24 * 200
    share = np.bincount(causes, minlength=len(fm.causes)) / len(causes)
    expect = fm.rates_per_hour(16384, 8) / fm.rate_per_hour(16384, 8)
    se = np.sqrt(expect * (1 - expect) / len(causes))
    assert np.all(np.abs(share - expect) < 5 * se + 1e-12)


def test_inline_model_and_bad_fields():
    fm = build_failure_model({"causes": [{"name": "x", "unit": "node", "rate_per_unit_day": 2.4,
                                          "recovery": "restart", "scope": "job"}]})
    assert fm.mtbf_h(8, 8) == pytest.approx(10.0)
    with pytest.raises(SpecError, match=r"causes\[0\]\.recovery"):
        build_failure_model({"causes": [{"name": "x", "unit": "node", "rate_per_unit_day": 1, "recovery": "pray", "scope": "job"}]})
    with pytest.raises(SpecError, match="failures.model"):
        load_failure_model("nope")
    assert {"llama3-h100", "rsc1", "rsc2", "opt-175b", "bloom-176b"} <= set(failure_model_names())
