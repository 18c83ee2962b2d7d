"""Search ergonomics: one stated global batch for all candidates, why layouts were not priced,
context parallelism priced (its short attention blocks and ring corrections), not free."""

import json

from wanka.cli import main
from wanka.cluster import load_cluster
from wanka.layout import Layout
from wanka.plan import SearchStats, estimate, search
from wanka.plan.search import common_gbs
from wanka.workload import load_model


def test_default_batch_is_one_for_all_candidates_and_stated():
    m = load_model("llama3-8b")
    c = load_cluster("wanka-10k", gpus=1000)  # 2^3 * 5^3: 16M tokens (2,048 x 8K) splits few ways
    stats = SearchStats()
    top = search(m, c, top=5, stats=stats)
    assert stats.gbs == common_gbs(m, c, m.seq_len) == 2000  # 16.4M tokens, within the default
    assert {e.layout.gbs for e in top} == {stats.gbs}
    assert "one batch for all candidates" in stats.gbs_rule
    # power-of-two GPU counts keep exactly the default 16M-token batch
    assert common_gbs(m, load_cluster("wanka-10k", gpus=1024), 8192) == 2048


def test_given_batch_is_used_and_indivisible_layouts_are_counted():
    m = load_model("llama3-8b")
    c = load_cluster("wanka-10k", gpus=96)
    stats = SearchStats()
    top = search(m, c, gbs=192, top=3, stats=stats)
    assert {e.layout.gbs for e in top} == {192} and stats.gbs_rule == "given"
    assert stats.dropped["batch_not_divisible_by_dp_x_mbs"] > 0  # e.g. dp=96, mbs=4
    # every evaluated layout is priced or dropped for a counted reason
    decided = stats.dropped["out_of_memory"] + stats.dropped["dominated_by_lighter_recompute"] + stats.dropped["dominated_by_zero1"]
    assert stats.evaluated == stats.timed + decided


def test_search_json_says_why_layouts_were_dropped(capsys):
    assert main(["plan", "--model", "llama3-70b", "--gpus", "256", "--top", "2", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)["search"]
    assert s["gbs"] == 2048 and s["dropped"]["out_of_memory"] > 0
    assert set(s["dropped"]) <= {"out_of_memory", "dominated_by_lighter_recompute", "dominated_by_zero1",
                                 "batch_not_divisible_by_dp_x_mbs", "interleaving_needs_microbatches_multiple_of_pp"}


def test_context_parallel_attention_is_slower_per_token():
    # same work per GPU: cp=8 runs attention as 8 ring steps of 1K x 1K blocks plus output corrections
    m = load_model("llama3-8b")
    c = load_cluster("wanka-10k", gpus=8)
    one = estimate(m, c, Layout.parse("tp=1,cp=1,dp=8,gbs=8"), seq_len=8192)
    eight = estimate(m, c, Layout.parse("tp=1,cp=8,dp=1,gbs=1"), seq_len=8192)
    per_token_one = one.breakdown["compute"] / 8192  # each GPU: one whole sequence
    per_token_eight = eight.breakdown["compute"] / 1024  # each GPU: 1/8 of one sequence
    assert per_token_eight > 1.02 * per_token_one


def test_context_parallelism_is_chosen_for_long_sequences_only():
    m = load_model("llama3-8b")
    c = load_cluster("wanka-10k", gpus=64)
    short = search(m, c, gbs=256, seq=4096, top=1)[0]
    long = search(m, c, gbs=64, seq=131072, top=1)[0]
    assert short.layout.cp == 1
    assert long.layout.cp > 1
