"""hetc's ONNX converter registry.

hetc's converters override or add to TVM's ``from_onnx`` converters without forking TVM:
an op hetc registers is converted by hetc, every other op falls back to TVM's table.

To add or fix an op, write a function in the file of its op family under ``ops/`` and
register it for the first opset whose semantics it implements::

    @converter("LayerNormalization", since=17)
    def layer_norm(ctx: ConvertContext, inputs: list[relax.Expr | None], attrs: Attrs):
        eps = attrs.get("epsilon", 1e-5)
        ...

then import the module in ``ops/__init__.py``. For a model of opset N the entry with the
largest ``since`` <= N is used. Converters are for the default ONNX domain; nodes of other
domains (``com.microsoft``, ...) are reported as unsupported. A converter must read every attribute the node carries
(``attrs.get``) or reject the value it does not handle (``attrs.reject``); attributes left
unread make the conversion fail instead of being silently ignored. A converter that handles
only some forms of its op (e.g. the run-time ``axes`` of a Reduce) returns ``NotImplemented``
for the others, which TVM's converter then converts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tvm import relax

from ...errors import ConversionError

DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass
class Attrs:
    """A node's attributes that remembers which ones the converter read."""

    node: str
    op_type: str
    values: dict[str, Any]
    read: set[str] = field(default_factory=set)

    def get(self, name: str, default: Any = None) -> Any:
        self.read.add(name)
        value = self.values.get(name, default)
        return value.decode() if isinstance(value, bytes) else value

    def reject(self, name: str, allowed: Callable[[Any], bool], default: Any = None) -> Any:
        """Read ``name`` and raise a ConversionError unless ``allowed(value)``."""
        value = self.get(name, default)
        if not allowed(value):
            raise ConversionError(
                f"node '{self.node}' ({self.op_type}): attribute {name}={value!r} is not supported"
            )
        return value

    def unread(self) -> list[str]:
        return sorted(set(self.values) - self.read)


@dataclass(frozen=True)
class ConvertContext:
    """What a converter may use besides its inputs and attributes."""

    bb: relax.BlockBuilder
    node: str  # node name, for error messages
    op_type: str
    opset: int
    num_outputs: int
    # ONNX element type of each input (0: absent, not a tensor or unknown). The Relax dtype
    # does not say which sub-byte type a uint8 tensor holds (see hetc/narrow.py).
    input_types: tuple[int, ...] = ()
    # The graph importer, for ops with subgraphs (``convert_subgraph``, ops/control_flow.py).
    importer: Any = None

    @property
    def label(self) -> str:
        """``node 'name' (OpType)``, how messages name the node."""
        return f"node '{self.node}' ({self.op_type})"

    def error(self, message: str) -> ConversionError:
        return ConversionError(f"{self.label}: {message}")

    def known(self, index: int):
        """The compile-time value of input ``index`` where shape arithmetic on symbolic dims
        gives it (``symbolic.py``: a numpy object array of ints and PrimExprs), else None. An op
        outside TVM's shape-compatible set gets such a value as a tensor; this is its value."""
        node = getattr(self.importer, "_node_now", None)
        if node is None or not index < len(node.input) or not node.input[index]:
            return None
        return self.importer.known_value(node.input[index])


ConverterFn = Callable[[ConvertContext, list, Attrs], Any]


@dataclass(frozen=True)
class ConverterEntry:
    op_type: str
    since: int
    fn: ConverterFn


_CONVERTERS: dict[str, list[ConverterEntry]] = {}


def converter(op_type: str, since: int) -> Callable[[ConverterFn], ConverterFn]:
    """Register ``fn`` as hetc's converter of ``op_type`` for opsets >= ``since``."""

    def register(fn: ConverterFn) -> ConverterFn:
        entries = _CONVERTERS.setdefault(op_type, [])
        if any(e.since == since for e in entries):
            raise ValueError(f"converter {op_type} since={since} registered twice")
        entries.append(ConverterEntry(op_type, since, fn))
        entries.sort(key=lambda e: e.since)
        return fn

    return register


def lookup(op_type: str, opset: int) -> ConverterEntry | None:
    """hetc's converter for ``op_type`` at ``opset``, or None to fall back to TVM."""
    candidates = [e for e in _CONVERTERS.get(op_type, []) if e.since <= opset]
    return candidates[-1] if candidates else None


def registered() -> dict[str, list[ConverterEntry]]:
    """All hetc converters by op type (a copy)."""
    return {k: list(v) for k, v in _CONVERTERS.items()}
