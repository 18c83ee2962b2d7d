import pytest

from wanka.sim import parse_scenario


def _merge(base, extra):
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@pytest.fixture
def scenario():
    """A small single-job scenario, with nested overrides: scenario(recovery={"kind": "elastic"})."""
    base = {
        "name": "t", "cluster": "wanka-10k", "cluster_gpus": 1280,
        "jobs": [{"name": "j", "gpus": 1024, "layout": "tp=8,pp=2", "step_time_s": 5.0}],
        "failures": {"causes": [
            {"name": "gpu", "unit": "node", "rate_per_unit_day": 0.02, "recovery": "node_swap", "scope": "node"},
            {"name": "bug", "unit": "node", "rate_per_unit_day": 0.005, "recovery": "restart", "scope": "job"}]},
        "checkpoint": {"policy": "young", "mode": "async", "write_s": 60, "stall_s": 1, "restore_s": 60},
        "recovery": {"kind": "hot_spare", "spares": 4, "detect_s": 60, "restart_s": 300, "repair_h": 24},
        "duration_days": 20, "runs": 8, "seed": 11,
    }
    return lambda **kw: parse_scenario(_merge(base, kw))
