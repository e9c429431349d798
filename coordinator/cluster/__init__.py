"""Several coordinator nodes on one PostgreSQL store (docs/ha.md).

Each coordinator partition is led by one node at a time, through a lease in PostgreSQL with a
leader epoch that only grows (``coordinator/runtime/store/postgres_leases.py``); every batch
append is fenced by it. This package is the node's side of it:

* :mod:`.node` — :class:`ClusterNode`: registration, heartbeats (one round trip renews the
  node and its leases, takes the partitions targeted at it and reads the cluster back), the
  deadline after which it may no longer serve, graceful moves (unload, then release), and the
  controller (one node at a time, through a lease of its own) running the balancer. It drives
  a :class:`PartitionHost` — the runtime — through "load this partition at this epoch",
  "unload it", "you lost it", "serve until".
* :mod:`.view` — the routing view the service layer asks: which node leads a group's
  partition, and where it is reached.
"""

from .node import ClusterConfig, ClusterNode, PartitionHost
from .view import ClusterView, NodeAddress

__all__ = ["ClusterConfig", "ClusterNode", "ClusterView", "NodeAddress", "PartitionHost"]
