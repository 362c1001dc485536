"""Parallel planning and sharded compilation over a device mesh.

Planning (analytical, no TVM; ``hetc parallel plan``):

- ``mesh``: ``--mesh 8xH100`` / ``2x8xA100`` -> devices, nodes and their links
- ``collectives``: alpha-beta costs of all-reduce, all-gather, reduce-scatter, all-to-all, p2p
- ``model``: the layer sequence the planner works on (transformer presets/specs, ONNX models)
- ``memory``: weights, gradients, optimizer states (ZeRO 0-3) and activations per device
- ``schedule``: GPipe, 1F1B and interleaved 1F1B: bubble, step time, activations in flight
- ``stages``: pipeline stages by dynamic programming under a memory limit
- ``planner``: the search over data x tensor x pipeline degrees, micro-batches and schedules
- ``cli``: the ``parallel`` command group

Sharded compilation and execution (TVM; ``hetc compile --tp/--pp``): ``compile`` (one
executable per rank and the manifest), ``megatron`` (the sharding plan: Megatron blocks found
on the graph), ``projections`` (fused projections split per part), ``shard`` (tensor
parallelism through ``relax.distributed``), ``pipeline`` (stage models), ``fuse`` (adjacent
collectives as one), ``runtime`` (a disco session, one process per rank), ``worker`` (the
disco worker entry), ``gloo`` (CPU collectives over torch.distributed) and ``launch`` (ranks
as plain processes over torch.distributed's ``env://`` rendezvous, on one machine or several).

Nothing is imported here: ``import hetc.parallel`` stays light.
"""
