"""plan/pp_layout.py: Megatron-Core pipeline layouts and MTP modules."""
import dataclasses

import pytest

from wanka.errors import SpecError
from wanka.plan.pp_layout import rank_pieces, virtual_stages


def test_deepseek_v3_layouts_place_every_layer_once():
    # Megatron-Bridge recipes/deepseek/deepseek_v3.py@v0.4.0 (4,4): [E+4t], 14 x [4t], [t m L]
    st = virtual_stages("Et*4|(t*4|)*14tmL")
    assert len(st) == 16 and sum(s.count("t") for s in st) == 61
    ranks = rank_pieces("Et*4|(t*4|)*14tmL", 4, 3)
    assert [r.dense + r.moe for r in ranks] == [16, 16, 16, 13]
    assert ranks[0].dense == 3 and ranks[3].mtp == 1 and ranks[3].loss and not ranks[0].loss
    h100 = rank_pieces("Et|(tt|)*30mL", 8, 3)  # run_script.py@v0.1.0rc3, pp 8 x vp 4
    assert [r.dense + r.moe for r in h100] == [7] + [8] * 6 + [6]


def test_bad_layout_is_refused():
    with pytest.raises(SpecError):
        virtual_stages("Ex|t")
    with pytest.raises(SpecError):
        rank_pieces("Et|t|tL", 2, 0)


def test_mtp_slows_the_last_stage_and_a_layout_can_rebalance_it():
    from wanka.plan.estimate import estimate
    from wanka.plan.published import framework_options, load_rows, row_cluster, row_layout, row_model

    row = {r["id"]: r for r in load_rows("nemo_perf")}["nemo_deepseekv3_b200_256gpu_mxfp8_26.02"]
    m, cl, (lay, _) = row_model(row), row_cluster(row), row_layout(row)
    opts = framework_options(row, lay)
    assert (opts.mtp_layers, opts.pp_layout) == (1, "Et*4|(t*4|)*14tmL")  # the row states both
    base = estimate(m, cl, lay, options=dataclasses.replace(opts, mtp_layers=0, pp_layout=None))
    mtp = estimate(m, cl, lay, options=dataclasses.replace(opts, pp_layout=None))
    laid = estimate(m, cl, lay, options=opts)
    assert mtp.step_time_s > base.step_time_s  # MoE layer + second head on the 3-layer last stage
    assert laid.step_time_s < mtp.step_time_s  # 1 layer + MTP + head there, 4 elsewhere
    with pytest.raises(SpecError):  # 16 virtual stages do not fit pp 8 x vpp 1
        estimate(m, cl, dataclasses.replace(lay, pp=8), options=opts)
