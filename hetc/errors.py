"""hetc's error hierarchy.

Every error a user can cause is a ``HetcError``; the CLI prints ``str(err)`` as one line on
stderr and exits with ``err.exit_code`` (2 for misuse, 1 for failures). Anything else that
escapes is a bug in hetc and keeps its traceback.
"""

from __future__ import annotations

import re

# TVM's log prefix ("[22:23:34] /project/src/relax/ir/block_builder.cc:67: "), its error type
# prefixes, and the IR printer's spellings of shapes and integers
_TVM_LOCATION = re.compile(r"\[\d\d:\d\d:\d\d\] \S+\.(?:cc|h):\d+: ")
_TVM_PREFIX = re.compile(r"^(?:(?:tvm\.error\.|tvm_ffi\.)?\w*(?:InternalError|TVMError)\s*:\s*)+")
_TVM_SHAPE = re.compile(r"R\.shape\((\[[^\]]*\])\)")
_TVM_INT = re.compile(r"T\.u?int\d+\((-?\d+)\)")
_PY_CLASS = re.compile(r"<class '(?:[\w.]+\.)?(\w+)'>")


def plain(line: str) -> str:
    """One line of an error message without TVM's internals: the failed check's condition and
    the source location go, the check's own explanation stays (``Check failed: groups > 0
    (0 vs. 0) : The number of groups ...`` -> ``The number of groups ...``); a check without
    one says so in hetc's words. TVM's ``R.shape([1, 4])`` and ``T.int64(4)`` read as ``[1, 4]``, ``4``,
    a class ``<class 'tvm.ir.expr.GenericConst'>`` as ``GenericConst``."""
    line = _TVM_PREFIX.sub("", _TVM_LOCATION.sub("", line.strip()))
    head, found, check = line.partition("Check failed:")
    if found:
        explained = check.partition(" is false:")[2] or check.partition(" : ")[2]
        line = head + (explained.strip() or "an internal consistency check of TVM failed")
    return _PY_CLASS.sub(r"\1", _TVM_INT.sub(r"\1", _TVM_SHAPE.sub(r"\1", line))).strip()


# TVM messages that say nothing to a user, in hetc's words: (pattern over the whole message,
# replacement; groups of the pattern may be used)
_UNLOWERED = re.compile(r"CodeGenVM cannot emit this Relax operator.*?Offending call:\s*R\.([\w.]+)\(",
                        re.DOTALL)
_TVM_MESSAGES = [
    (_UNLOWERED,
     (r"the operator \1 could not be lowered to code: its input shapes are not known to be compatible at "
     r"compile time (bind the symbolic dims with --input-shape)")),
]


def unlowered_call(err: BaseException, mod) -> str | None:
    """Why ``err`` (TVM's VM code generation meeting an op no pass lowered) happened, read from
    ``mod``, the module given to the build: an op whose output shape was inferred has no
    lowering in TVM for its attributes (a ``conv2d_transpose`` in NHWC), named here; one whose
    shape was not (inputs not known to be compatible) keeps ``last_line``'s hint. None when
    ``err`` is another error or the call is not found."""
    import tvm
    from tvm import relax

    found = _UNLOWERED.search(str(err))
    if found is None:
        return None
    name = f"relax.{found.group(1)}"
    for func in mod.functions.values():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        for block in func.body.blocks:
            for binding in block.bindings:
                call = binding.value
                if not (isinstance(call, tvm.ir.Call) and isinstance(call.op, tvm.ir.Op)
                        and call.op.name == name):
                    continue
                if not (isinstance(call.ty, relax.TensorType) and hasattr(call.ty.shape, "values")):
                    return None  # shapes unknown: last_line's hint holds
                attrs = call.attrs
                layouts = [f"{k}={getattr(attrs, k)}" for k in dir(attrs) if k.endswith("layout")]
                form = f" with {', '.join(layouts)}" if layouts else " in this form"
                return (f"the operator {found.group(1)} could not be lowered to code: TVM has no lowering "
                        f"for it{form}")
    return None


def first_line(err: BaseException) -> str:
    """The first non-empty line of an exception, TVM's wording removed (``plain``); the type name
    if there is no text. For errors of Python libraries (onnx, torch) that lead with what failed."""
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    return plain(lines[0]) if lines else type(err).__name__


def last_line(err: BaseException) -> str:
    """The line of an exception worth showing: TVM puts the check that failed on the last
    non-empty line of its (often multi-line) messages; the type name if there is no text.
    TVM's internal wording is removed (``plain``), and its messages that say nothing to a user
    are replaced (``_TVM_MESSAGES``)."""
    text = str(err)
    for pattern, replacement in _TVM_MESSAGES:
        found = pattern.search(text)
        if found:
            return found.expand(replacement)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return plain(lines[-1]) if lines else type(err).__name__


# Starts the message of a check the compiled model makes at run time (a run-time value that is
# out of range); the message ends at " |". The runtime turns such a failure into an InputError.
RUNTIME_CHECK = "hetc run-time check failed: "


def runtime_check_message(err: BaseException) -> str | None:
    """The message of a failed run-time check in ``err`` (a VM error), or None."""
    text = str(err)
    start = text.find(RUNTIME_CHECK)
    if start < 0:
        return None
    end = text.find(" |", start)
    return text[start + len(RUNTIME_CHECK):end if end >= 0 else None].strip()


# TVM's VM checking a tensor against a shape the compiled model fixed (a match_cast):
# "Check failed: input_shape[i] == reg (1 vs. 4) : ErrorContext(match_cast, ...)"
_MATCH_CAST = re.compile(r"\((-?\d+) vs\. (-?\d+)\)\s*:\s*ErrorContext\(match_cast")


def shape_check_message(err: BaseException) -> str | None:
    """A failed shape check of the VM (an input's symbolic dim meets a size the model fixes
    where it broadcasts or reshapes it) in hetc's words, or None."""
    found = _MATCH_CAST.search(str(err))
    if found is None:
        return None
    return (f"the inputs do not fit the model: a dim the model computes as {found.group(2)} is {found.group(1)} "
            "with these inputs (a symbolic input dim is used where the model fixes its size)")


class HetcError(Exception):
    """Base class: a problem the user can act on. ``exit_code`` is what the CLI returns."""

    exit_code = 1


class UsageError(HetcError):
    """Invalid options or arguments (unknown target, malformed ``--input-shape``, ...)."""

    exit_code = 2


class ModelLoadError(HetcError):
    """The model file is missing, unreadable, truncated, not ONNX, or fails validation."""


class UnsafePathError(ModelLoadError):
    """An external-data location escapes the model's directory."""


class UnsupportedOpError(HetcError):
    """The graph holds ops no converter handles; ``ops`` lists every one of them."""

    def __init__(self, message: str, ops: list[str]):
        super().__init__(message)
        self.ops = ops


class ConversionError(HetcError):
    """A converter failed on a node; the message names the node and its op type."""


class ShapeError(HetcError):
    """Input shapes cannot be determined or bound (dynamic dims left unbound, rank mismatch)."""


class CompileError(HetcError):
    """A pass or the code generator failed."""


class InputError(HetcError):
    """Run-time inputs do not match the compiled model (name, shape or dtype)."""


class ArtifactError(HetcError):
    """An artifact directory is missing, damaged, or from an incompatible version."""


class OutputPathError(HetcError):
    """The output location cannot be written."""


class DeviceError(HetcError):
    """A device the artifact needs is not present (no GPU, no driver) or failed."""
