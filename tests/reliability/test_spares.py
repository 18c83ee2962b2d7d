"""ByteRobust-style P99 spare sizing."""

import math

import numpy as np
import pytest

from wanka.reliability import load_failure_model
from wanka.reliability.spares import binomial_quantile, p99_spares


def test_binomial_quantile_matches_sampling():
    rng = np.random.default_rng(0)
    draws = rng.binomial(1024, 0.004, 200_000)
    k = binomial_quantile(1024, 0.004, 0.99)
    assert np.mean(draws <= k) >= 0.99 and np.mean(draws <= k - 1) < 0.99


def test_p99_spares_grow_with_scale_and_window():
    fm = load_failure_model("llama3-h100")
    at16k = p99_spares(fm, 16384, 8)
    # Llama 3 node-swap rate: ~6.6 node failures per day on 2,048 nodes -> P99 of ~Binomial is ~13
    lam = sum(r for r, c in zip(fm.rates_per_hour(16384, 8), fm.causes) if c.recovery == "node_swap") * 24
    assert lam == pytest.approx(6.6, abs=0.1)
    assert lam + 2 * math.sqrt(lam) <= at16k <= lam + 3 * math.sqrt(lam) + 1
    assert p99_spares(fm, 131072, 8) > 5 * at16k
    assert p99_spares(fm, 16384, 8, window_h=72) > at16k
