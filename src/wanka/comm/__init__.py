"""Communication layer: what a collective costs on this topology (docs/comm.md)."""

from wanka.comm.collectives import ALGORITHMS, KINDS, bus_bandwidth_GBps, collective_time
from wanka.comm.groups import Group, group_for_stride, group_of_gpus

__all__ = ["ALGORITHMS", "KINDS", "Group", "bus_bandwidth_GBps", "collective_time", "group_for_stride", "group_of_gpus"]
