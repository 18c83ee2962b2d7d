"""Hardware catalog: accelerators and NICs with sourced figures (see catalog.yaml)."""

from wanka.hardware.catalog import GPU, NIC, gpu, gpu_names, inline_gpu, nic, nic_names

__all__ = ["GPU", "NIC", "gpu", "gpu_names", "inline_gpu", "nic", "nic_names"]
