"""``CompiledModel``: a compiled (or loaded) model that runs with numpy arrays."""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import narrow
from ..errors import ArtifactError, HetcError, InputError, last_line
from ..targets import get_target
from .artifact import Manifest, read_manifest, write_artifact
from .standalone import cache_call, cpu_problem, shape_problem


@dataclass
class CompiledModel:
    """A model ready to run. ``run`` takes and returns ``{name: ndarray}``."""

    manifest: Manifest
    report: dict[str, Any] = field(default_factory=dict)  # compile report (stages, graph, timings)
    plan: dict[str, Any] = field(default_factory=dict)  # device of each op
    _runners: list = field(default_factory=list, repr=False)
    _write_parts: Any = field(default=None, repr=False)  # (tmp_dir) -> None, for save()

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.manifest.inputs]

    @property
    def output_names(self) -> list[str]:
        return [s.name for s in self.manifest.outputs]

    def _check_inputs(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        # The common case, checked first and cheaply (a call's fixed cost): every input there,
        # of its dtype, of its static shape. Anything else goes through the full check below.
        get = getattr(inputs, "get", None)
        if get is not None and len(inputs) == len(self._signature):
            arrays = []
            for name, dtype, shape in self._signature:
                array = get(name)
                if array is None:
                    break
                array = np.asarray(array)
                if array.dtype != dtype or array.shape != shape:
                    break
                arrays.append(array)
            else:
                return arrays
        expected = {s.name: s for s in self.manifest.inputs}
        missing = [n for n in expected if n not in inputs]
        unknown = [n for n in inputs if n not in expected]
        if missing or unknown:
            parts = ([f"missing input(s) {', '.join(missing)}"] if missing else []) + (
                [f"unknown input(s) {', '.join(unknown)}"] if unknown else [])
            signature = ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in expected.values())
            raise InputError(f"{'; '.join(parts)}; the model takes {signature}")
        arrays = []
        for name, spec in expected.items():
            array = np.asarray(inputs[name])
            if array.dtype.name != spec.dtype:
                raise InputError(f"input '{name}' has dtype {array.dtype.name}, expected {spec.dtype}")
            arrays.append(array)
        problem = shape_problem([s.to_json() for s in expected.values()], [a.shape for a in arrays],
                                self.manifest.dims, self.manifest.gears)
        if problem:
            raise InputError(problem)
        return arrays

    @functools.cached_property
    def _signature(self) -> list[tuple]:
        """(name, numpy dtype, shape) of each input; shape None where a dim is symbolic (or the
        dtype unknown to numpy), which always takes the full check."""
        out = []
        for spec in self.manifest.inputs:
            try:
                dtype = np.dtype(spec.dtype)
            except TypeError:
                dtype = None
            static = all(isinstance(d, int) for d in spec.shape) and not self.manifest.gears
            out.append((spec.name, dtype, tuple(spec.shape) if static and dtype is not None else None))
        return out

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        arrays = self._check_inputs(inputs)
        if self._sub_byte:  # int4, float4e2m1, ...: one byte per element (hetc/narrow.py)
            arrays = [narrow.to_raw(a) for a in arrays]
        if self.manifest.kv_cache:  # the cache kept in place: called with the exported signature
            outputs = self._cache_call(arrays)
        else:  # one part today; the partitioned executor (placement issue) chains several
            outputs = self._runners[0](arrays)
        if len(outputs) != len(self.manifest.outputs):
            raise ArtifactError(f"model returned {len(outputs)} outputs, manifest lists "
                                f"{len(self.manifest.outputs)}")
        if self._sub_byte:
            outputs = [narrow.from_raw(o, s.dtype) for o, s in zip(outputs, self.manifest.outputs)]
        return dict(zip(self._output_names, outputs))

    def _cache_call(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        import tvm

        runner = self._runners[0]
        main, device = runner.function()
        return cache_call(lambda *args: runner.invoke(main, list(args)), self.manifest.kv_cache,
                          [s.to_json() for s in self.manifest.inputs], arrays, tvm, device, np, InputError)

    @functools.cached_property
    def _sub_byte(self) -> bool:
        return any(narrow.is_narrow(s.dtype) for s in (*self.manifest.inputs, *self.manifest.outputs))

    @functools.cached_property
    def _output_names(self) -> list[str]:
        return self.output_names

    def save(self, directory: str | Path) -> Path:
        """Write the artifact directory atomically; returns its path."""
        out = Path(directory).absolute()

        def fill(tmp: Path) -> Manifest:
            self._write_parts(tmp)
            (tmp / "report.json").write_text(json.dumps(self.report, indent=2) + "\n")
            (tmp / "plan.json").write_text(json.dumps(self.plan, indent=2) + "\n")
            return self.manifest

        write_artifact(out, fill)
        return out


def _load_part(root: Path, part):
    problem = cpu_problem({"name": part.name, "cpu": part.cpu})
    if problem:
        raise ArtifactError(f"{root}: {problem}")
    target = get_target(part.target)
    try:
        if part.devices:  # split by a placement: one VM over all its devices, driven by the host target
            return target.backend.load(root / part.library, part.threads, part.devices)
        return target.backend.load(root / part.library, part.threads)
    except HetcError:
        raise  # already one clear line (a device that is not here, ...)
    except Exception as err:
        raise ArtifactError(f"{root}: cannot load part '{part.name}' ({part.library}): "
                            f"{last_line(err)}") from err


def load(directory: str | Path) -> CompiledModel:
    """Load an artifact directory written by ``CompiledModel.save`` (validates it first)."""
    root = Path(directory).absolute()
    manifest = read_manifest(root)
    for record in manifest.offloads:  # regions the runtime provides: register them, say how they run
        serve = get_target(record.target).backend.serve
        if not record.linked and serve is not None:
            record.execution = serve(root, record)
            record.emulated = record.execution != "device"
    if manifest.parallel:  # one process per rank (hetc.parallel)
        from ..parallel.runtime import ParallelRunner

        threads = manifest.parts[0].threads if manifest.parts else 0
        runners = [ParallelRunner(root, manifest.parallel, manifest.outputs, threads)]
    else:
        runners = [_load_part(root, part) for part in manifest.parts]

    def copy_parts(tmp: Path) -> None:
        for rel in manifest.files:
            if rel not in {"manifest.json", "report.json", "plan.json"}:
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(root / rel, tmp / rel)

    def read_json(name: str) -> dict:
        path = root / name
        return json.loads(path.read_text()) if path.is_file() else {}

    return CompiledModel(manifest, read_json("report.json"), read_json("plan.json"), runners, copy_parts)
