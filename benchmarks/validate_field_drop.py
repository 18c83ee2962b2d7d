"""How much each built-in validate row's |error| moves when one optional field is removed (null):
an audit of the defaults `wanka plan validate` takes for rows written by others (docs/plan.md
"Reading published rows"). Prints, per set and field, the rows compared, the rows that become
skipped, and the median / max change of |error| (points of relative error).

    .venv/bin/python benchmarks/validate_field_drop.py
"""

import copy, statistics
from wanka.plan.published import built_in_runs, load_rows
from wanka.plan.row_check import check_row
fields = [("parallelism", k) for k in ("sequence_parallel", "virtual_pipeline_chunks_per_rank", "micro_batch_size", "zero_or_fsdp", "comm_overlap", "recompute", "precision", "pipeline_schedule", "cp", "ep")] + [("hardware", "inter_node_bw_per_gpu_Gbps"), ("hardware", "nvlink_domain_size"), ("architecture", "kv_heads"), ("architecture", "ffn_hidden_size")]
for name in built_in_runs():
    rows = load_rows(name)
    base = [check_row(r) for r in rows]
    for sec, key in fields:
        moved, skipped = [], 0
        for r, b in zip(rows, base):
            if b.error is None or r.get(sec, {}).get(key) is None: continue
            rr = copy.deepcopy(r); rr[sec][key] = None
            c = check_row(rr)
            if c.error is None: skipped += 1; continue
            moved.append(abs(c.error) - abs(b.error))
        if moved or skipped:
            big = [m for m in moved if abs(m) > 0.05]
            print(f"{name:18} {sec}.{key:36} rows {len(moved):3} skipped {skipped:3}  |err| change median {statistics.median(moved) if moved else 0:+.3f} max {max(moved, default=0):+.3f}  >5pt: {len(big)}")
