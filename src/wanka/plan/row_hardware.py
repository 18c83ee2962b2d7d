"""A published run's cluster (`wanka plan validate`): its accelerator by catalogue name, GPU count,
NVLink domain and per-GPU scale-out bandwidth on a fat-tree (docs/plan.md "Reading published rows")."""

from __future__ import annotations

import re

from wanka.cluster.model import Cluster
from wanka.cluster.spec import DEFAULT_GPUS_PER_NODE, DEFAULT_SCALE_OUT_GBPS, parse_cluster_spec, platform
from wanka.errors import SpecError
from wanka.plan.row_text import catalog_part, count, row_gpus, section


def catalog_gpu(text: str) -> str:
    """The catalogue name of an accelerator text (plan/row_text.catalog_part)."""
    return catalog_part(text)


def row_cluster(row: dict, assumed: list[str] | None = None) -> Cluster:
    """The run's cluster: its GPUs, NVLink domain and per-GPU scale-out bandwidth on a fat-tree.
    A domain that does not divide the GPU count (128 GPUs of GB200 NVL72 racks) becomes the largest
    divisor of the count in whole nodes below it (64: a job takes 16 of a rack's 18 trays)."""
    hw = section(row, "hardware")
    # a part the catalog lacks, stated by the row itself (`hardware.part`: an inline GPU with its
    # sources, e.g. torchtitan's 500 W HBM2e H100s); its name keeps the catalog family prefix
    part = hw.get("part") if isinstance(hw.get("part"), dict) else None
    gpu = part["name"] if part else catalog_part(hw.get("gpu"), hw.get("hbm_gb"), assumed)
    gpus = row_gpus(row, assumed)
    # the part's platform (catalog node_gpus / scale_out_Gbps: a GB200/GB300 compute tray holds 4 GPUs,
    # DGX A100 one 200 Gb/s HCA per GPU, Blackwell Ultra 800 Gb/s); 8 GPUs and 400 Gb/s where it has none
    node, platform_Gbps = platform(part or gpu)
    per_node = node or DEFAULT_GPUS_PER_NODE
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
    if bw is None:
        bw = network_Gbps_per_gpu(hw.get("network"), hw.get("nics_per_node"), per_node)
        if bw is not None and assumed is not None:
            assumed.append(f"{bw:g} Gb/s per GPU scale-out from hardware.network")
    if bw is None:  # the part's platform NIC (catalog scale_out_Gbps, sourced there), else 400 Gb/s
        bw = platform_Gbps or DEFAULT_SCALE_OUT_GBPS
        if assumed is not None:
            assumed.append(f"{bw:g} Gb/s per GPU scale-out")
    spec = {"name": str(row.get("id", "run")), "gpu": part or gpu, "gpus": gpus, "gpus_per_node": min(per_node, domain),
            "scale_up": {"domain": domain}, "scale_out": {"bandwidth_Gbps": bw, "topology": "fat-tree"}}
    try:
        return Cluster(parse_cluster_spec(spec, str(row.get("id"))))
    except SpecError as exc:  # name the row's field, not the cluster spec's
        head = exc.field.split(".")[0]
        field_name = {"gpus": "gpu_count", "gpus_per_node": "gpu_count", "scale_up": "nvlink_domain_size",
                      "scale_out": "inter_node_bw_per_gpu_Gbps"}.get(head, head)
        raise SpecError(f"hardware.{field_name}", exc.expected, exc.got) from None


# InfiniBand generations by name, Gb/s per port (4x links): EDR 100, HDR 200, NDR 400, XDR 800
_IB_GBPS = {"edr": 100, "hdr": 200, "ndr": 400, "xdr": 800}


def network_Gbps_per_gpu(text, nics_per_node, gpus_per_node: int) -> float | None:
    """Scale-out Gb/s per GPU from a row's `hardware.network` text: the port speed ('200 Gb/s', '400G',
    'HDR') times the ports per node (`nics_per_node`, '8x200G', '4 x 100 Gb/s', '8 HCAs'), over the GPUs
    of a node; 'per GPU' named, or no port count, reads the speed as per GPU (one rail per GPU, as
    DGX/HGX nodes are built). None when the text names no speed."""
    raw = str(text or "")
    low = raw.lower()
    speed = re.search(r"(\d{2,4})\s*(?:Gb/s|Gbps|Gbit/s|Gb\b|GbE|G\b)", raw, flags=0)
    gbps = float(speed.group(1)) if speed else next((v for k, v in _IB_GBPS.items() if re.search(rf"\b{k}\b", low)), None)
    if gbps is None:
        return None
    ports = nics_per_node if isinstance(nics_per_node, int) and nics_per_node > 0 else None
    if ports is None:
        m = re.search(r"(\d{1,2})\s*[x×]\s*\d{2,4}\s*g", low) or re.search(r"(\d{1,2})\s*(?:compute\s+)?(?:hcas?|nics?|ports?|adapters?|rails?)\b", low)
        ports = int(m.group(1)) if m else None
    if ports is None or "per gpu" in low:
        return gbps
    return gbps * ports / gpus_per_node
