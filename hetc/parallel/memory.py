"""Memory per device: model states (weights, gradients, optimizer states) and activations.

Model states for training with Adam follow the ZeRO paper (Rajbhandari et al., "ZeRO: memory
optimizations toward training trillion parameter models", SC 2020, section 5 and figure 1).
With 16-bit weights (mixed precision) each of the Phi parameters on a device has a 2-byte
weight, a 2-byte gradient and K = 12 bytes of optimizer state (fp32 master weight, momentum and
variance); with fp32 weights, 4 + 4 + K = 8. Over a data-parallel group of N_d devices:

- stage 0 (plain data parallelism): (2 + 2 + K) Phi = 16 Phi
- stage 1 (optimizer states partitioned): 4 Phi + K Phi / N_d
- stage 2 (+ gradients): 2 Phi + (2 + K) Phi / N_d
- stage 3 (+ weights): (2 + 2 + K) Phi / N_d

Phi here is what a device holds after tensor and pipeline parallelism: its stage's layers, the
split ones divided by t. Inference holds the weights only.

Activations (``activations``): per layer and sample the bytes ``model.Layer`` says the
backward pass keeps (the split part divided by t), times the micro-batch size, times the
micro-batches the pipeline schedule keeps in flight on the device (``schedule.in_flight``).
Inference keeps nothing for a backward pass; its activations are the working set of the
largest layer for one micro-batch.

Not modelled: the gathered parameters of the layer being computed under ZeRO-3, temporary
buffers of collectives and kernels, memory fragmentation, the KV cache of generation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .model import Layer


@dataclass(frozen=True)
class Memory:
    weights: float = 0.0
    gradients: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations

    def __add__(self, other: Memory) -> Memory:
        return Memory(self.weights + other.weights, self.gradients + other.gradients,
                      self.optimizer + other.optimizer, self.activations + other.activations)


def optimizer_bytes(weight_bytes: int) -> int:
    """K, Adam's bytes per parameter: fp32 master weight, momentum and variance with 16-bit
    weights (12), momentum and variance with fp32 weights (8)."""
    return 12 if weight_bytes < 4 else 8


def model_states(params: float, weight_bytes: int, training: bool, zero: int = 0, dp: int = 1) -> Memory:
    """Weights, gradients and optimizer states of ``params`` parameters on one device of a
    data-parallel group of ``dp`` under ZeRO stage ``zero`` (the module docstring's forms)."""
    if not training:
        return Memory(weights=params * weight_bytes)
    if zero not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage {zero}; stages are 0-3")
    w, g, k = weight_bytes, weight_bytes, optimizer_bytes(weight_bytes)
    return Memory(weights=params * w / (dp if zero >= 3 else 1),
                  gradients=params * g / (dp if zero >= 2 else 1),
                  optimizer=params * k / (dp if zero >= 1 else 1))


def layer_params(layer: Layer, t: int) -> float:
    """Parameters of ``layer`` on one of t tensor-parallel ranks."""
    return layer.params / layer.share(t)


def layer_activations(layer: Layer, t: int) -> float:
    """Bytes per sample ``layer`` keeps on one of t tensor-parallel ranks."""
    return layer.activation_bytes / layer.share(t) + layer.replicated_activation_bytes


def activations(layers: Sequence[Layer], t: int, micro_batch: int, in_flight: float, training: bool) -> float:
    """Activation bytes on one device holding ``layers``: kept ones for ``in_flight``
    micro-batches (training), or the largest layer's working set (inference)."""
    per_sample = [layer_activations(layer, t) for layer in layers]
    if not training:
        return micro_batch * max(per_sample, default=0.0)
    return in_flight * micro_batch * sum(per_sample)
