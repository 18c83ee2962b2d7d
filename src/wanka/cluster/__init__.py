"""Cluster model: nodes, scale-up domains, scale-out fabrics, campuses, power (docs/cluster.md)."""

from wanka.cluster.model import Cluster, Level
from wanka.cluster.presets import DEFAULT_CLUSTER, cluster_names, load_cluster

__all__ = ["Cluster", "Level", "DEFAULT_CLUSTER", "cluster_names", "load_cluster"]
