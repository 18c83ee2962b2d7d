"""Megatron-DeepSpeed runs (plan/published_runs/megatron_deepspeed.json) and DeepSpeed's pipeline
engine mechanisms (plan/frameworks.py 'megatron-deepspeed')."""

import dataclasses

from wanka.plan.estimate import estimate
from wanka.plan.published import check_row, framework_options, load_rows, row_cluster, row_layout, row_model


def test_rows_are_priced_with_the_pipeline_engine_schedule():
    rows = load_rows("megatron_deepspeed")
    assert len(rows) == 4
    for r in rows:
        c = check_row(r)
        assert c.skipped is None and c.basis == "tokens/s"
        opts = framework_options(r, row_layout(r)[0])
        # DeepSpeed's pipeline engine partitions stage outputs over the TP ranks (is_pipe_partitioned)
        assert (opts.grad_sync, opts.dp_overlap, opts.pp_scatter_gather) == ("per_step", False, True)


def test_partitioned_sends_cost_a_tp_th_of_whole_activations():
    """DeepSpeed's engine sends 1/tp of each stage output per rank (PartitionedTensor); sending the
    whole tensor from every TP rank (pp_scatter_gather=False) costs more than twice as much at tp=4."""
    r = next(r for r in load_rows("megatron_deepspeed") if r["id"].startswith("bloom"))
    m, c, (lay, _) = row_model(r), row_cluster(r), row_layout(r)
    ds = framework_options(r, lay)
    split = estimate(m, c, lay, options=ds)
    whole = estimate(m, c, lay, options=dataclasses.replace(ds, pp_scatter_gather=False))
    assert lay.tp == 4 and whole.breakdown["pp_comm"] > 2 * split.breakdown["pp_comm"]
    assert whole.tokens_per_s_per_gpu < split.tokens_per_s_per_gpu


def test_mtnlg_runs_on_selenes_80gb_a100s_and_fits():
    """Microsoft Research blog (2021-10-11): each of Selene's DGX A100 servers has eight A100 80GB GPUs
    (the llm-analysis relay said 40GB); at TP 8 x PP 35 without ZeRO the model then fits."""
    for r in load_rows("megatron_deepspeed"):
        if r["id"].startswith("mtnlg"):
            assert row_cluster(r).gpu.name == "a100-80gb"
            c = check_row(r)
            assert c.fits and c.memory_GiB < 80


def _deepspeed_train_schedule(stage: int, stages: int, m: int):
    """DeepSpeed runtime/pipe/schedule.py TrainSchedule: per step, a stage exchanges with a neighbour
    (forward steps: RecvActivation, SendGrad; backward steps: SendActivation, RecvGrad), then computes."""
    def micro_batch(step):
        even_step, even_stage = step % 2 == 0, stage % 2 == 0
        if even_step and even_stage:
            return step // 2 - stage // 2, True
        if not even_step and not even_stage:
            return (step - 1) // 2 - stage // 2, True
        if even_step:
            return step // 2 - stages + (stage + 1) // 2, False
        return (step - 1) // 2 - stages + 1 + stage // 2, False

    ops, prev = [], -1
    for step in range(2 * (m + stages - 1)):
        mb, fwd = micro_batch(step)
        ok = 0 <= mb < m
        if fwd and stage > 0:
            ops += [("act", stage - 1, stage, mb)] * ok + [("grad", stage, stage - 1, prev)] * (0 <= prev < m)
        if not fwd and stage < stages - 1:
            ops += [("act", stage, stage + 1, prev)] * (0 <= prev < m) + [("grad", stage + 1, stage, mb)] * ok
        ops += [("F" if fwd else "B", mb)] * ok
        prev = mb
    return ops


def _blocking_makespan(stages: int, m: int, f: float, b: float, t: float) -> float:
    """Each send/recv pair is a rendezvous (p2p.py: async_op must be False) taking t on both stages."""
    progs = [_deepspeed_train_schedule(s, stages, m) for s in range(stages)]
    pc, clock, waiting, done = [0] * stages, [0.0] * stages, {}, {}
    moved = True
    while moved:
        moved = False
        for s in range(stages):
            while pc[s] < len(progs[s]):
                op = progs[s][pc[s]]
                if op[0] in ("F", "B"):
                    clock[s] += f if op[0] == "F" else b
                elif (op, s) in done:
                    clock[s] = done.pop((op, s))
                elif op in waiting and waiting[op][0] != s:  # the peer is already there
                    peer, when = waiting.pop(op)
                    end = max(when, clock[s]) + t
                    done[(op, peer)], clock[s] = end, end
                else:  # wait for the peer
                    waiting[op] = (s, clock[s])
                    break
                pc[s] += 1
                moved = True
    assert pc == [len(p) for p in progs]  # no deadlock: every stage ran its whole schedule
    return max(clock)


def test_deepspeeds_blocking_pipeline_pays_four_transfers_per_micro_batch():
    """Without transfers the engine's schedule has 1F1B's makespan (m + pp - 1)(F + B); with transfers of
    time T each further micro-batch costs F + B + 4T: every stage waits out its sends and its receives
    (Options.pp_blocking_p2p doubles pp_comm; Megatron's batched exchange pays 2T)."""
    approx = __import__("pytest").approx
    for stages, m in ((4, 16), (8, 64), (12, 96)):
        assert _blocking_makespan(stages, m, 1.0, 3.0, 0.0) == approx((m + stages - 1) * 4.0)
        for t in (0.05, 0.1):
            extra = _blocking_makespan(stages, m + 16, 1.0, 3.0, t) - _blocking_makespan(stages, m, 1.0, 3.0, t)
            assert extra == approx(16 * (1.0 + 3.0 + 4 * t))
    r = next(r for r in load_rows("megatron_deepspeed") if r["id"].startswith("bloom"))
    m_, c, (lay, _) = row_model(r), row_cluster(r), row_layout(r)
    ds = framework_options(r, lay)
    assert ds.pp_blocking_p2p
    batched = estimate(m_, c, lay, options=dataclasses.replace(ds, pp_blocking_p2p=False))
    assert estimate(m_, c, lay, options=ds).breakdown["pp_comm"] == approx(2 * batched.breakdown["pp_comm"])
