"""A published run's cluster (`wanka plan validate`): its accelerator by catalogue name, GPU count,
NVLink domain and per-GPU scale-out bandwidth on a fat-tree (docs/plan.md "Reading published rows")."""

from __future__ import annotations

from wanka.cluster.model import Cluster
from wanka.cluster.spec import parse_cluster_spec
from wanka.errors import SpecError
from wanka.plan.row_text import catalog_part, count, row_gpus


def _sec(row: dict, key: str) -> dict:
    v = row.get(key)
    return v if isinstance(v, dict) else {}


def catalog_gpu(text: str) -> str:
    """The catalogue name of an accelerator text (plan/row_text.catalog_part)."""
    return catalog_part(text)


def row_cluster(row: dict, assumed: list[str] | None = None) -> Cluster:
    """The run's cluster: its GPUs, NVLink domain and per-GPU scale-out bandwidth on a fat-tree.
    A domain that does not divide the GPU count (128 GPUs of GB200 NVL72 racks) becomes the largest
    divisor of the count in whole nodes below it (64: a job takes 16 of a rack's 18 trays)."""
    hw = _sec(row, "hardware")
    # a part the catalog lacks, stated by the row itself (`hardware.part`: an inline GPU with its
    # sources, e.g. torchtitan's 500 W HBM2e H100s); its name keeps the catalog family prefix
    part = hw.get("part") if isinstance(hw.get("part"), dict) else None
    gpu = part["name"] if part else catalog_part(hw.get("gpu"), hw.get("hbm_gb"), assumed)
    gpus = row_gpus(row, assumed)
    per_node = 4 if gpu == "gb200" else 8  # a GB200 compute tray holds 4 GPUs (NVL72: 18 trays)
    domain = count(hw, "nvlink_domain_size", "hardware")
    if domain is None:  # the part's usual scale-up domain from the catalogue (GB200 NVL72: 72, HGX: 8)
        from wanka.hardware.catalog import gpu as catalogue_gpu

        domain = catalogue_gpu(gpu).scale_up.domain if not part else 8
        if assumed is not None:
            assumed.append(f"NVLink domain {domain} (the part's usual)")
    if isinstance(gpus, int) and gpus > 0 and gpus % domain:
        fit = max((d for d in range(per_node, domain + 1, per_node) if gpus % d == 0), default=per_node)
        if assumed is not None:
            assumed.append(f"NVLink domain {fit} of {domain} (the domain does not divide {gpus} GPUs)")
        domain = fit
    bw = hw.get("inter_node_bw_per_gpu_Gbps")
    if bw is not None and (isinstance(bw, bool) or not isinstance(bw, (int, float)) or bw <= 0):
        raise SpecError("hardware.inter_node_bw_per_gpu_Gbps", "a positive number (Gb/s per GPU)", bw)
    if bw is None:  # the part's generation of NIC: DGX/HGX A100 one 200 Gb/s HDR HCA per GPU, H100 on 400 Gb/s NDR
        bw = 200 if gpu.startswith("a100") else 400  # (NVIDIA DGX A100 / DGX H100 user guides: 8 compute HCAs)
        if assumed is not None:
            assumed.append(f"{bw} Gb/s per GPU scale-out")
    spec = {"name": str(row.get("id", "run")), "gpu": part or gpu, "gpus": gpus, "gpus_per_node": min(per_node, domain),
            "scale_up": {"domain": domain}, "scale_out": {"bandwidth_Gbps": bw, "topology": "fat-tree"}}
    try:
        return Cluster(parse_cluster_spec(spec, str(row.get("id"))))
    except SpecError as exc:  # name the row's field, not the cluster spec's
        head = exc.field.split(".")[0]
        field_name = {"gpus": "gpu_count", "gpus_per_node": "gpu_count", "scale_up": "nvlink_domain_size",
                      "scale_out": "inter_node_bw_per_gpu_Gbps"}.get(head, head)
        raise SpecError(f"hardware.{field_name}", exc.expected, exc.got) from None
