"""The .npz files of model inputs and outputs, read and written with one-line errors: for
``hetc run``/``hetc benchmark`` (``cli.py``) and a parallel artifact's per-rank entry
(``parallel/launch.py``)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from .errors import InputError, OutputPathError, last_line


def load_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of ``path`` by name; an InputError for a missing or unreadable file."""
    if not path.is_file():
        raise InputError(f"{path}: no such inputs file")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:
        raise InputError(f"{path}: not a .npz archive of arrays (write one with numpy.savez)") from err
    except MemoryError as err:  # an array header claiming more than the memory
        raise InputError(f"{path}: an array in it is larger than the memory ({last_line(err)})") from err


def save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path``; an OutputPathError where it cannot be written."""
    try:
        with open(path, "wb") as f:
            np.savez(f, **arrays)
    except OSError as err:
        raise OutputPathError(f"{path}: cannot write: {err.strerror}") from err
