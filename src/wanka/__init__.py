"""wanka (万卡): the software stack of a 10,000-GPU AI training cluster.

Layers (see docs/): hardware, cluster, workload, comm, plan, sched, reliability, sim, train, serve.
"""

__version__ = "0.1.0"
