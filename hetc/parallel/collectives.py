"""Collective communication costs by the alpha-beta model: a message of S bytes over a link of
latency alpha and bandwidth beta takes ``alpha + S / beta``.

Flat algorithms on n devices (Thakur, Rabenseifner and Gropp, "Optimization of collective
communication operations in MPICH", IJHPCA 2005; Patarasuk and Yuan, "Bandwidth optimal
all-reduce algorithms for clusters of workstations", JPDC 2009):

- ring all-reduce of S bytes:          ``2(n-1) alpha + 2 (n-1)/n S / beta``
- double binary tree all-reduce:       ``2 log2(n) alpha + 2 S / beta`` (pipelined reduce then
  broadcast over two complementary trees, each carrying half the data: Sanders, Speck and
  Traeff, "Two-tree algorithms for full bandwidth broadcast, reduction and scan", Parallel
  Computing 2009; NCCL 2.4's tree algorithm)
- ring all-gather (S = gathered size), reduce-scatter (S = input size), pairwise all-to-all
  (S = each device's send buffer): ``(n-1) alpha + (n-1)/n S / beta``
- point-to-point:                       ``alpha + S / beta``

A group spanning nodes (``mesh.Group``: k members per node, r nodes) uses the hierarchical
form (Jia et al., "Highly scalable deep learning training system with mixed-precision", 2018;
NCCL's intra/inter-node split): an all-reduce is an intra-node reduce-scatter of S, an
inter-node all-reduce of S/k between the r devices of one rank-in-node (each with its own
NIC: ``node_link`` is per device), and an intra-node all-gather of S. All-gather and
reduce-scatter are the two halves of that; an all-to-all sends (k-1)/n of S over the intra-node
link and (n-k)/n of it over the network, one after the other. With k = n these are the flat
forms on the intra-node link, with k = 1 the flat forms on the network.

All-reduce takes the faster of ring and tree at each level, as NCCL's tuner does. Every cost
also carries the bytes each device sends (its communication volume): 2(n-1)/n S for an
all-reduce (ring, and the tree on average), (n-1)/n S for the others.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from .mesh import Group, Link, Mesh


@dataclass(frozen=True)
class Comm:
    seconds: float
    bytes_sent: float  # by each device

    def __add__(self, other: Comm) -> Comm:
        return Comm(self.seconds + other.seconds, self.bytes_sent + other.bytes_sent)

    def __mul__(self, times: float) -> Comm:
        return Comm(self.seconds * times, self.bytes_sent * times)


NONE = Comm(0.0, 0.0)


def ring_all_reduce(size: float, n: int, link: Link) -> Comm:
    if n <= 1:
        return NONE
    sent = 2 * (n - 1) / n * size
    return Comm(2 * (n - 1) * link.latency + sent / link.bandwidth, sent)


def tree_all_reduce(size: float, n: int, link: Link) -> Comm:
    if n <= 1:
        return NONE
    return Comm(2 * math.log2(n) * link.latency + 2 * size / link.bandwidth, 2 * (n - 1) / n * size)


def all_gather_flat(size: float, n: int, link: Link) -> Comm:
    """Ring all-gather; reduce-scatter and pairwise all-to-all cost the same."""
    if n <= 1:
        return NONE
    sent = (n - 1) / n * size
    return Comm((n - 1) * link.latency + sent / link.bandwidth, sent)


def p2p(size: float, link: Link) -> Comm:
    return Comm(link.latency + size / link.bandwidth, size) if size > 0 else NONE


def _levels(group: Group, mesh: Mesh) -> tuple[int, int, Link]:
    """(members per node, nodes, network link) of a group."""
    return group.per_node, group.nodes, mesh.inter or mesh.intra


def _all_reduce_flat(size: float, n: int, link: Link) -> Comm:
    return min(ring_all_reduce(size, n, link), tree_all_reduce(size, n, link), key=lambda c: c.seconds)


def all_reduce(size: float, group: Group, mesh: Mesh) -> Comm:
    k, r, net = _levels(group, mesh)
    if r == 1:
        return _all_reduce_flat(size, k, mesh.intra)
    # intra-node reduce-scatter and all-gather around the inter-node all-reduce of a 1/k shard
    return all_gather_flat(size, k, mesh.intra) * 2 + _all_reduce_flat(size / k, r, net)


def all_gather(size: float, group: Group, mesh: Mesh) -> Comm:
    """``size``: the gathered result."""
    k, r, net = _levels(group, mesh)
    return all_gather_flat(size / k, r, net) + all_gather_flat(size, k, mesh.intra)


def reduce_scatter(size: float, group: Group, mesh: Mesh) -> Comm:
    """``size``: each device's input."""
    return all_gather(size, group, mesh)  # the same steps in reverse


def all_to_all(size: float, group: Group, mesh: Mesh) -> Comm:
    """``size``: each device's send buffer, 1/n of it to each member."""
    k, _, net = _levels(group, mesh)
    n = group.size
    intra = Comm((k - 1) * mesh.intra.latency + (k - 1) / n * size / mesh.intra.bandwidth, (k - 1) / n * size)
    inter = Comm((n - k) * net.latency + (n - k) / n * size / net.bandwidth, (n - k) / n * size)
    return intra + inter


COLLECTIVES: dict[str, Callable[[float, Group, Mesh], Comm]] = {
    "all-reduce": all_reduce, "all-gather": all_gather, "reduce-scatter": reduce_scatter,
    "all-to-all": all_to_all,
}
