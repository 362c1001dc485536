"""Pipeline schedules: GPipe, 1F1B and interleaved 1F1B, their bubble and activation memory.

p stages, m micro-batches per step, t_f and t_b a stage's forward and backward time per
micro-batch (balanced stages; the planner uses the slowest stage).

- GPipe (Huang et al., "GPipe", NeurIPS 2019): all m forwards, then all m backwards. The
  pipeline fills and drains once: step = (m + p - 1)(t_f + t_b).
- 1F1B (PipeDream-Flush; Narayanan et al., "Memory-efficient pipeline-parallel DNN
  training", ICML 2021): after p - k - 1 warm-up forwards stage k alternates one forward, one
  backward. Same step time as GPipe, but stage k keeps only min(p - k, m) micro-batches'
  activations instead of m.
- Interleaved 1F1B (Narayanan et al., "Efficient large-scale language model training on GPU
  clusters using Megatron-LM", SC 2021, section 2.2.2): each device runs v model chunks
  (stages k, k + p, ...), each taking 1/v of the time, so the fill and drain shrink v-fold:
  step = (v m + p - 1)(t_f + t_b)/v. Needs m to be a multiple of p, and v times the
  point-to-point messages.

Bubble, two definitions (both here, both in the literature):

- ``bubble_fraction``: idle share of the step, (p - 1)/(v m + p - 1) (v = 1: GPipe, 1F1B);
- ``bubble_ratio``: bubble time over ideal compute time, (p - 1)/(v m): Narayanan et al.
  2021's "bubble time fraction" t_pb / t_id = (p - 1)/m (section 2.2.1), (1/v)(p - 1)/m
  interleaved.

They agree: fraction = ratio / (1 + ratio).

Activations in flight at the peak on stage k (``in_flight``, in units of a whole stage's
activations for one micro-batch): GPipe m; 1F1B min(p - k, m); interleaved Megatron-LM's
warm-up count plus one, (p - k - 1) 2 + (v - 1) p + 1 chunk micro-batches (at most v m), each
1/v of the stage: p + (p - 1)/v on the first stage, slightly more than 1F1B's p (Korthikanti
et al., "Reducing activation recomputation in large transformer models", 2022, section 4.2.3).

Inference runs forwards only: GPipe and interleaved keep their fill and drain, 1F1B is GPipe.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULES = ("gpipe", "1f1b", "interleaved")


@dataclass(frozen=True)
class Schedule:
    name: str  # one of SCHEDULES
    chunks: int = 1  # v: model chunks per device (interleaved only)

    def __post_init__(self) -> None:
        if self.name not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.name!r}; schedules: {', '.join(SCHEDULES)}")
        if self.chunks < 1 or (self.chunks > 1) != (self.name == "interleaved"):
            raise ValueError(f"{self.name}: {self.chunks} chunks per device")

    def __str__(self) -> str:
        return f"interleaved(v={self.chunks})" if self.name == "interleaved" else self.name

    def bubble_fraction(self, p: int, m: int) -> float:
        """Idle share of the step time."""
        return (p - 1) / (self.chunks * m + p - 1)

    def bubble_ratio(self, p: int, m: int) -> float:
        """Bubble time over the ideal (bubble-free) compute time."""
        return (p - 1) / (self.chunks * m)

    def step_seconds(self, p: int, m: int, stage_seconds: float) -> float:
        """One step, from the slowest device's time per micro-batch (forward, plus backward
        when training, plus its sends to the next stage: v of them when interleaved)."""
        return (self.chunks * m + p - 1) * stage_seconds / self.chunks

    def in_flight(self, p: int, m: int, stage: int) -> float:
        """Micro-batches whose activations ``stage`` keeps at its peak (training)."""
        if self.name == "gpipe":
            return float(m)
        if self.name == "1f1b":
            return float(min(p - stage, m))
        v = self.chunks
        return min((p - stage - 1) * 2 + (v - 1) * p + 1, v * m) / v
