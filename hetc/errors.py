"""hetc's error hierarchy.

Every error a user can cause is a ``HetcError``; the CLI prints ``str(err)`` as one line on
stderr and exits with ``err.exit_code`` (2 for misuse, 1 for failures). Anything else that
escapes is a bug in hetc and keeps its traceback.
"""

from __future__ import annotations


def last_line(err: BaseException) -> str:
    """The line of an exception worth showing: TVM puts the check that failed on the last
    non-empty line of its (often multi-line) messages; the type name if there is no text."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return lines[-1] if lines else type(err).__name__


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
