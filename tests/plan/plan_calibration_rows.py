"""The rows of the built-in calibration set (src/wanka/plan/published_runs/calibration.json), turned
into what the planner prices by wanka.plan.published (the same mapping `wanka plan validate` uses)."""

from __future__ import annotations

from wanka.errors import SpecError
from wanka.plan import Options
from wanka.plan import published
from wanka.plan.published import row_cluster, row_model  # noqa: F401  (re-exported for the tests)

ROWS_PATH = published.BUILT_IN / "calibration.json"


def load_rows() -> list[dict]:
    return published.load_rows(ROWS_PATH)


def row_layout(row: dict):
    return published.row_layout(row)[0]


def row_options(row: dict) -> Options:
    """The row's framework profile for its layout (ZeRO-stage switches need it), as validate prices it."""
    try:
        lay = row_layout(row)
    except SpecError:  # rows without a full layout are skipped by the tests that price them
        lay = None
    return published.framework_options(row, lay)


def runnable(row: dict) -> bool:
    p = row["parallelism"]
    need = [p.get("tp"), p.get("pp"), p.get("dp"), p.get("micro_batch_size"), p.get("global_batch_size_seqs")]
    return row["result"].get("tokens_per_sec_per_gpu") is not None and all(v is not None for v in need)


def zero3_2021_options(row: dict) -> Options | None:
    """The DeepSpeed-2021 ZeRO-3 profile of a SC'21 Table 2 row (published.framework_options), else None."""
    opts = row_options(row)
    return opts if opts.zero3_unit == "weight" and opts.algorithm == "flat-ring" else None
