"""Running ONNX backend node tests through hetc (or onnxruntime) and classifying the outcome.

The node tests come with the installed ``onnx`` package as test-case definitions
(``onnx.backend.test.case.node``); ``generate`` writes them as ``<dir>/<test>/model.onnx`` plus
``test_data_set_*/{input,output}_*.pb``, the layout of ONNX's own backend test data.
``run_test`` compiles one test for the CPU target with hetc's public API, runs every data set
and compares with the expected outputs (floats: rtol = atol = 1e-3 and NaN where NaN is
expected; integers, bools and strings exactly). ``benchmarks/onnx_conformance.py`` runs the
whole suite in parallel worker processes.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import warnings
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper

RTOL = ATOL = 1e-3

# Outcome categories, in the order tables print them.
PASS = "pass"
CATEGORIES = (
    PASS,
    "value-mismatch",  # ran, numbers differ
    "shape-mismatch",
    "dtype-mismatch",
    "unsupported-op",  # UnsupportedOpError: no converter
    "unsupported-io",  # sequence/optional/map inputs or outputs, or dtypes hetc cannot take
    "conversion-error",  # a converter raised
    "shape-error",  # shape inference / binding
    "load-error",  # checker or model file
    "compile-error",  # a pass or codegen failed
    "runtime-error",  # the compiled model raised
    "internal-error",  # any other exception: a bug
    "timeout",
    "crash",  # the worker process died (segfault, abort)
)


@dataclass
class Result:
    test: str
    op: str
    outcome: str
    error: str
    seconds: float
    frozen: str = ""  # inputs compiled as constants (``constant_inputs``) for ``frozen_outcome``
    # The outcome when a failing test is retried with its shape-deciding inputs frozen (``outcome``
    # itself is without freezing); "" when not measured (``retry_frozen=False``, other runners).
    frozen_outcome: str = ""


# Node tests feed the inputs that decide output shapes (axes, pads, shape, k, ...) as graph
# inputs where exported models store constants. hetc compiles them as run-time values; a test
# that still fails to compile is retried with its small integer inputs frozen to their values
# (``constant_inputs``), and ``frozen_outcome`` records that second outcome.
_RETRY_WITH_FROZEN = {"conversion-error", "shape-error", "unsupported-op", "compile-error"}


def node_tests_dir() -> Path:
    """Where generated node tests are cached: $HETC_CACHE or ~/.cache/hetc.

    Keyed by the onnx and ml_dtypes versions: the expected outputs come from onnx's reference
    implementations, and their sub-byte casts (INT4, UINT4, INT2, UINT2) go through ml_dtypes
    (0.7.0 made onnx 1.23's give zeros), so a cache written under another ml_dtypes is stale.
    """
    from importlib.metadata import PackageNotFoundError, version

    root = Path(os.environ.get("HETC_CACHE", Path.home() / ".cache" / "hetc"))
    try:
        ml_dtypes = version("ml_dtypes")
    except PackageNotFoundError:
        ml_dtypes = "none"
    return root / f"onnx-node-tests-{onnx.__version__}-ml_dtypes-{ml_dtypes}"


def generate(out: Path | None = None, op_type: str | None = None) -> Path:
    """Write the installed onnx package's node tests (all, or one op's) under ``out``."""
    out = out or node_tests_dir()
    marker = out / ".complete"
    if op_type is None and marker.exists():
        return out
    if op_type is None:  # one writer at a time (pytest-xdist workers start together)
        import fcntl

        out.mkdir(parents=True, exist_ok=True)
        with open(out.parent / f".{out.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return out if marker.exists() else _write_cases(out, None)
    return _write_cases(out, op_type)


def _write_cases(out: Path, op_type: str | None) -> Path:
    import onnx.backend.test.case.node as node_cases

    marker = out / ".complete"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reference implementations warn on inf/nan
        cases = node_cases.collect_testcases(op_type)
    for case in cases:
        case_dir = out / case.name
        case_dir.mkdir(parents=True, exist_ok=True)
        (case_dir / "model.onnx").write_bytes(case.model.SerializeToString())
        for i, (inputs, outputs) in enumerate(case.data_sets):
            data_dir = case_dir / f"test_data_set_{i}"
            data_dir.mkdir(exist_ok=True)
            _write_values(data_dir, "input", inputs, case.model.graph.input)
            _write_values(data_dir, "output", outputs, case.model.graph.output)
    if op_type is None:
        marker.write_text(str(len(cases)))
    return out


def _write_values(data_dir: Path, kind: str, values, infos) -> None:
    for j, value in enumerate(values):
        info = infos[j].type
        if info.HasField("sequence_type"):
            proto = numpy_helper.from_list(value, infos[j].name)
        elif info.HasField("optional_type"):
            proto = numpy_helper.from_optional(value, infos[j].name)
        elif info.HasField("map_type"):
            proto = numpy_helper.from_dict(value, infos[j].name)
        elif isinstance(value, onnx.TensorProto):
            proto = value
        else:
            proto = numpy_helper.from_array(np.asarray(value), infos[j].name)
        (data_dir / f"{kind}_{j}.pb").write_bytes(proto.SerializeToString())


def list_tests(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if (p / "model.onnx").is_file())


def main_op(test_dir: Path, model: onnx.ModelProto | None = None) -> str:
    """The op a node test is about: the graph's op whose name the test name contains."""
    model = model or onnx.load(test_dir / "model.onnx", load_external_data=False)
    name = test_dir.name.lower().replace("_", "")
    ops = [n.op_type for n in model.graph.node]
    for op in sorted(set(ops), key=len, reverse=True):
        if op.lower() in name:
            return op
    return ops[0] if ops else "?"


def _read_tensor(path: Path, info: onnx.ValueInfoProto) -> np.ndarray | None:
    """The array in ``path``, or None when the value is not a tensor (sequence, optional, map)."""
    if not info.type.HasField("tensor_type"):
        return None
    proto = onnx.TensorProto()
    proto.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(proto)


def load_data_sets(test_dir: Path, model: onnx.ModelProto):
    """[(inputs by name, expected outputs)] for every data set; None where not all tensors."""
    inits = {t.name for t in model.graph.initializer}
    inputs_info = [v for v in model.graph.input if v.name not in inits]
    sets = []
    for data_dir in sorted(test_dir.glob("test_data_set_*")):
        inputs = {}
        for j, info in enumerate(inputs_info):
            path = data_dir / f"input_{j}.pb"
            if not path.exists():
                continue  # an omitted optional input
            array = _read_tensor(path, info)
            if array is None:
                return None
            inputs[info.name] = array
        outputs = []
        for j, info in enumerate(model.graph.output):
            array = _read_tensor(data_dir / f"output_{j}.pb", info)
            if array is None:
                return None
            outputs.append(array)
        sets.append((inputs, outputs))
    return sets


def compare(actual: np.ndarray, expected: np.ndarray) -> str | None:
    """None if ``actual`` matches, else the outcome category and why."""
    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        return f"shape-mismatch: {list(actual.shape)} vs expected {list(expected.shape)}"
    if actual.dtype != expected.dtype:
        return f"dtype-mismatch: {actual.dtype} vs expected {expected.dtype}"
    rtol = atol = RTOL
    if expected.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"):
        # numpy has no arithmetic on these (ml_dtypes): compare in float32, to one unit in the
        # last place of the narrow type
        rtol = max(RTOL, float(ml_dtypes.finfo(expected.dtype).eps))
        actual, expected = actual.astype(np.float32), expected.astype(np.float32)
    if expected.dtype.kind in "fc":
        nan = np.isnan(expected)
        if not np.array_equal(np.isnan(actual), nan):
            return "value-mismatch: NaN positions differ"
        a, e = actual[~nan].astype(np.float64), expected[~nan].astype(np.float64)
        if not np.isclose(a, e, rtol=rtol, atol=atol).all():
            return f"value-mismatch: max abs error {np.max(np.abs(a - e)):.3g}"
        return None
    if not np.array_equal(actual, expected):
        return f"value-mismatch: {int(np.sum(actual != expected))} of {expected.size} elements differ"
    return None


def _classify(err: BaseException) -> str:
    from . import errors

    table = [
        (errors.UnsupportedOpError, "unsupported-op"),
        (errors.ConversionError, "conversion-error"),
        (errors.ShapeError, "shape-error"),
        (errors.ModelLoadError, "load-error"),
        (errors.CompileError, "compile-error"),
        (errors.InputError, "runtime-error"),
    ]
    for kind, category in table:
        if isinstance(err, kind):
            return category
    if isinstance(err, errors.HetcError) and "only tensors are supported" in str(err):
        return "unsupported-io"
    return "internal-error"


def _first_line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:300]


def run_test(test_dir: Path, runner: str = "hetc", retry_frozen: bool = True) -> Result:
    """Run one node test with ``runner`` ("hetc", "onnxruntime" or "tvm").

    ``outcome`` is hetc's outcome with every graph input a run-time input. With ``retry_frozen``
    a hetc test that fails to compile is retried with its small integer inputs frozen to their
    values: ``frozen_outcome`` is the better of the two outcomes (``frozen`` names the inputs
    when the retry passed)."""
    start = time.perf_counter()
    model = onnx.load(test_dir / "model.onnx", load_external_data=False)
    op = main_op(test_dir, model)

    def result(outcome: str, error: str = "") -> Result:
        return Result(test_dir.name, op, outcome, error, round(time.perf_counter() - start, 3))

    data_sets = load_data_sets(test_dir, model)
    if data_sets is None:
        return result("unsupported-io", "a graph input or output is not a tensor")
    if runner != "hetc":
        make = {"onnxruntime": _ort_runner, "tvm": _tvm_runner}[runner]
        try:
            return _check(make(test_dir, data_sets), data_sets, result)
        except Exception as err:
            return result("load-error", _first_line(err))
    first = _check_hetc(test_dir, data_sets, result, ())
    frozen = _shape_inputs(data_sets)
    if not retry_frozen:
        return first
    first.frozen_outcome = first.outcome
    if first.outcome not in _RETRY_WITH_FROZEN or not frozen:
        return first
    second = _check_hetc(test_dir, data_sets, result, frozen)
    if second.outcome == PASS:
        first.frozen_outcome, first.frozen = PASS, " ".join(frozen)
    first.seconds = second.seconds  # both attempts
    return first


def _is_config(value: np.ndarray) -> bool:
    """Scalars (depth, k, frame_step), integer vectors (axes, pads, shapes, repeats) and short
    float vectors (Resize scales, roi): inputs that configure an op rather than carry data."""
    return value.ndim == 0 or (value.dtype.kind in "iu" and value.ndim == 1) or (
        value.dtype.kind == "f" and value.ndim == 1 and value.size <= 8)


def _shape_inputs(data_sets) -> tuple[str, ...]:
    names = set(data_sets[0][0]) if data_sets else set()
    for inputs, _ in data_sets:
        names &= {k for k, v in inputs.items() if _is_config(v)}
    return tuple(sorted(names))


def _check_hetc(test_dir: Path, data_sets, result, frozen: tuple[str, ...]) -> Result:
    try:
        run = _hetc_runner(test_dir, data_sets, frozen)
    except Exception as err:  # classified, not hidden: the category says what kind of failure
        return result(_classify(err), _first_line(err))
    return _check(run, data_sets, result)


def _check(run, data_sets, result) -> Result:
    for inputs, expected in data_sets:
        try:
            outputs = run(inputs)
        except Exception as err:
            return result("runtime-error", _first_line(err))
        if len(outputs) != len(expected):
            return result("shape-mismatch", f"{len(outputs)} outputs, expected {len(expected)}")
        for actual, ref in zip(outputs, expected, strict=True):
            problem = compare(actual, ref)
            if problem:
                category, _, detail = problem.partition(": ")
                return result(category, detail)
    return result(PASS)


def _hetc_runner(test_dir: Path, data_sets, frozen: tuple[str, ...] = ()):
    """Compile once per input signature, binding the shapes the data sets use (node test
    models often leave dims symbolic; a user binds them with ``input_shapes`` the same way)
    and freezing the ``frozen`` inputs to their values."""
    import hetc

    def key(inputs):
        return tuple((k, v.shape, v.tobytes() if k in frozen else b"") for k, v in inputs.items())

    compiled = {}
    for inputs, _ in data_sets:
        if key(inputs) not in compiled:
            compiled[key(inputs)] = hetc.compile(
                test_dir / "model.onnx", target="cpu",
                input_shapes={k: v.shape for k, v in inputs.items() if k not in frozen},
                constant_inputs={k: inputs[k] for k in frozen})

    def run(inputs):
        model = compiled[key(inputs)]
        return list(model.run({k: v for k, v in inputs.items() if k not in frozen}).values())

    return run


def _tvm_runner(test_dir: Path, data_sets):
    """TVM's own path, for comparison: ``from_onnx`` with the data's shapes, ``tvm.compile``."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    model = onnx.load(test_dir / "model.onnx")
    shapes = {k: list(v.shape) for k, v in data_sets[0][0].items()} if data_sets else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = from_onnx(model, shape_dict=shapes, keep_params_in_input=False)
    vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())

    def flatten(value):
        if isinstance(value, tvm.runtime.Tensor):
            return [value.numpy()]
        if isinstance(value, tvm.runtime.ShapeTuple):
            return [np.array(list(value), np.int64)]
        return [a for item in value for a in flatten(item)]

    return lambda inputs: flatten(vm["main"](*[tvm.runtime.tensor(v) for v in inputs.values()]))


def _ort_runner(test_dir: Path, data_sets=None):
    import onnxruntime as ort

    session = ort.InferenceSession(str(test_dir / "model.onnx"), providers=["CPUExecutionProvider"])
    return lambda inputs: session.run(None, inputs)


# --- running many tests in worker processes ---------------------------------------------

def _worker(conn, runner: str, retry_frozen: bool) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    while True:
        try:
            test = conn.recv()
        except EOFError:
            return
        if test is None:
            return
        conn.send(run_test(Path(test), runner, retry_frozen))


class _Slot:
    """One worker process and the test it is running."""

    def __init__(self, ctx, runner: str, retry_frozen: bool) -> None:
        self.runner, self.retry_frozen = runner, retry_frozen
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, runner, retry_frozen), daemon=True)
        self.proc.start()
        child.close()
        self.test: Path | None = None
        self.started = 0.0

    def submit(self, test: Path) -> None:
        self.test, self.started = test, time.perf_counter()
        self.conn.send(str(test))

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()
        self.conn.close()


def run_suite(tests: list[Path], runner: str, jobs: int, timeout: float, progress=None,
              retry_frozen: bool = True) -> list[Result]:
    """Run ``tests`` in ``jobs`` worker processes (see ``run_test`` for ``retry_frozen``)."""
    ctx = mp.get_context("spawn")  # a fresh interpreter: no TVM state inherited across forks
    pending = list(reversed(tests))
    slots = [_Slot(ctx, runner, retry_frozen) for _ in range(min(jobs, len(tests)))]
    results: list[Result] = []

    def failed(slot: _Slot, outcome: str, error: str) -> Result:
        return Result(slot.test.name, main_op(slot.test), outcome, error,
                      round(time.perf_counter() - slot.started, 3))

    for slot in slots:
        slot.submit(pending.pop())
    while any(s.test is not None for s in slots):
        busy = [s for s in slots if s.test is not None]
        ready = wait([s.conn for s in busy], timeout=1.0)
        now = time.perf_counter()
        for i, slot in enumerate(slots):
            if slot.test is None:
                continue
            result = None
            if slot.conn in ready:
                try:
                    result = slot.conn.recv()
                except (EOFError, OSError):
                    slot.proc.join()
                    result = failed(slot, "crash", f"worker died (exit code {slot.proc.exitcode})")
                    slots[i] = slot = _replace(slot, ctx)
            elif now - slot.started > timeout:
                result = failed(slot, "timeout", f"no result after {timeout:g} s")
                slots[i] = slot = _replace(slot, ctx)
            if result is None:
                continue
            results.append(result)
            if progress:
                progress(result, len(results), len(tests))
            slot.test = None
            if pending:
                slot.submit(pending.pop())
    for slot in slots:
        slot.conn.send(None)
        slot.proc.join(timeout=5)
        if slot.proc.is_alive():
            slot.kill()
    return sorted(results, key=lambda r: r.test)


def _replace(slot: _Slot, ctx) -> _Slot:
    slot.kill()
    return _Slot(ctx, slot.runner, slot.retry_frozen)
