"""A placement chosen by cost: the op graph, its devices, the solver's answer, and how to show it.

``make_plan(graph, targets, ...)`` builds the cost model's problem (``cost.problem``), solves it
(``solve.solve``) and returns a ``Plan``. ``Plan.to_json()`` is what ``hetc plan -o`` writes
and what ``hetc compile`` records as plan.json; it is itself a valid ``--placement`` file (only
``nodes[].name`` and ``nodes[].device`` are read back). ``Plan.assignment`` is node name ->
device for ``hetc.placement.apply`` and the BYOC offloads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..graph import OpGraph
from ..targets import Target
from .cost import Device, devices_for, problem


@dataclass
class Plan:
    model: str
    graph: OpGraph
    devices: list[Device]
    problem: object  # problem.Problem over the nodes that run as themselves (cost.contraction)
    sources: list[list[str]]  # per problem node, per device: where its time comes from
    index: list[int | None]  # op graph node -> problem node (None: folded at compile time)
    result: object  # problem.Result

    def device_index(self) -> list[int]:
        """Each op graph node's device (index into ``devices``): its problem node's, and for a
        node folded at compile time its first user's (the device that reads the constant)."""
        a = self.result.assignment
        out = [0 if j is None else int(a[j]) for j in self.index]
        users: dict[int, int] = {}
        for node in self.graph.nodes:
            for p in node.preds:
                users.setdefault(p, node.id)
        for node in reversed(self.graph.nodes):  # a folded node's user may itself be folded
            if self.index[node.id] is None and node.id in users:
                out[node.id] = out[users[node.id]]
        return out

    @property
    def assignment(self) -> dict[str, str]:
        return {node.name: self.devices[k].name for node, k in zip(self.graph.nodes, self.device_index())}

    def on(self, target: str) -> set[int]:
        """Op graph ids of the nodes placed on ``target``'s device."""
        return {node.id for node, k in zip(self.graph.nodes, self.device_index())
                if self.devices[k].target.name == target}

    def edges(self) -> list[dict]:
        p, a = self.problem, self.result.assignment
        out = []
        for (src, dst), nbytes in zip(p.edges, p.edge_bytes):
            x, y = int(a[src]), int(a[dst])
            seconds = 0.0 if x == y else float(p.latency[x, y] + nbytes / p.bandwidth[x, y])
            out.append({"from": p.names[src], "to": p.names[dst], "bytes": int(nbytes), "seconds": seconds})
        return out

    def to_json(self) -> dict:
        p, r = self.problem, self.result
        placed = self.device_index()
        nodes = []
        for node, k, j in zip(self.graph.nodes, placed, self.index):
            if j is None:
                seconds, source = 0.0, "folded at compile time"
            elif p.names[j] != node.name:
                seconds, source = 0.0, f"folded into {p.names[j]}"
            else:
                seconds, source = float(p.times[j, k]), self.sources[j][k]
            nodes.append({"name": node.name, "op": node.op, "device": self.devices[k].name, "seconds": seconds,
                          "source": source})
        edges = self.edges()
        a = [int(k) for k in r.assignment]
        devices = [{"name": d.name, "target": d.target.name, "spec": d.spec.name, "spec_source": d.spec.source,
                    "ops": sum(1 for k in placed if k == j),
                    "busy_seconds": float(sum(p.times[i, j] for i, k in enumerate(a) if k == j))}
                   for j, d in enumerate(self.devices)]
        crossing = [e for e in edges if e["seconds"] > 0]
        return {"model": self.model, "solver": r.solver, "objective": r.objective_kind,
                "predicted_seconds": float(r.objective), "optimal": bool(r.optimal),
                "gap": None if r.gap is None else float(r.gap), "solve_seconds": float(r.seconds),
                "status": r.status, "devices": devices, "nodes": nodes, "edges": edges,
                "transfer_seconds": float(sum(e["seconds"] for e in crossing)),
                "transfer_bytes": int(sum(e["bytes"] for e in crossing)),
                "note": "times are predictions of the cost model (each node names its source), not measurements"}


def make_plan(graph: OpGraph, targets: Sequence[Target], model: str = "model", *,
              specs: Mapping[str, str] | None = None, pins: Mapping[str, str] | None = None,
              objective: str = "latency", solver: str = "auto", time_limit: float = 10.0) -> Plan:
    """Place ``graph`` on device 0 of each target by cost (see the module doc)."""
    from .solve import solve

    devices = devices_for(targets, specs)
    prob, sources, index = problem(graph, devices, pins)
    result = solve(prob, objective=objective, solver=solver, time_limit=time_limit)
    result.assignment = np.asarray(result.assignment, dtype=np.int64)
    return Plan(model, graph, devices, prob, sources, index, result)
