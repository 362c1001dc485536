"""Running a named, flat pass pipeline and reporting what each stage changed.

A pipeline is a plain list of ``Stage``s; backends build theirs from the phase functions
in ``hetc.passes.phases`` (see ``hetc/backends/<target>/pipeline.py``). No stage decides
its own position.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import tvm
from tvm import relax

from .. import crash
from ..errors import CompileError, HetcError, last_line
from ..native_log import release_frames


@dataclass(frozen=True)
class Stage:
    """One named step: ``make()`` returns the TVM pass (or pass sequence) to run."""

    name: str
    description: str
    make: Callable[[], tvm.transform.Pass]


@dataclass(frozen=True)
class ModuleStats:
    relax_calls: int  # calls to Relax operators, call_tir included, over all Relax functions
    relax_functions: int
    tir_functions: int


@dataclass(frozen=True)
class StageReport:
    stage: str
    before: ModuleStats
    after: ModuleStats
    seconds: float

    def to_json(self) -> dict:
        return asdict(self)


def rewrite_functions(mutator, mod: tvm.IRModule, funcs: dict | None = None) -> tvm.IRModule:
    """``mod`` with each Relax function (or each of ``funcs``, {global var: function}) passed
    through ``mutator``, a ``PyExprMutator`` made over ``mod``: the body of hetc's own Relax
    module passes."""
    if funcs is None:
        funcs = {gv: f for gv, f in mod.functions_items() if isinstance(f, relax.Function)}
    for gvar, func in funcs.items():
        mutator.builder_.update_func(gvar, mutator.visit_expr(func))
    return mutator.builder_.get()


def out_dtype(attrs) -> str | None:
    """A conv call's ``out_dtype`` attribute as the op constructors take it (None: unset)."""
    return None if attrs.out_dtype is None or str(attrs.out_dtype) == "" else str(attrs.out_dtype)


def call_rewrite_pass(name: str, op_name: str | tuple[str, ...], rewrite: Callable[[relax.Call], relax.Expr | None]):
    """A module pass that replaces each call of the Relax operator ``op_name`` (or of any of a
    tuple of them; after its arguments are rewritten) by ``rewrite(call)``, where that returns an
    expression (None keeps the call): the shape of hetc's one-op rewrites (``passes/conv3d.py``, ...)."""
    from tvm.relax.expr_functor import PyExprMutator, mutator

    ops = [tvm.ir.Op.get(n) for n in ((op_name,) if isinstance(op_name, str) else op_name)]

    @mutator
    class _Rewrite(PyExprMutator):  # pylint: disable=abstract-method
        def visit_call_(self, call: relax.Call) -> relax.Expr:  # pylint: disable=arguments-renamed
            call = super().visit_call_(call)
            if isinstance(call, relax.Call) and any(call.op.same_as(op) for op in ops):
                replaced = rewrite(call)
                if replaced is not None:
                    return self.builder_.normalize(replaced)
            return call

    @tvm.transform.module_pass(opt_level=0, name=name)
    def apply(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_functions(_Rewrite(mod), mod)

    return apply


def relax_op_counts(mod: tvm.IRModule) -> Counter[str]:
    """Calls per Relax operator name (``relax.nn.conv2d``, ``relax.call_tir``, ...) in all Relax
    functions: the values of their bindings (normalized Relax binds every call; one map from
    C++ per function, 2.2x faster than visiting every node from Python, and the pipeline
    counts after each of its ~38 stages: 21 -> 9 ms for BERT-base int8's 1,577 calls on a 2-core
    AMD EPYC, LLVM ``znver3``: AVX2)."""
    counts: Counter[str] = Counter()
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            for value in relax.analysis.get_var2val(func).values():
                if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                    counts[value.op.name] += 1
    return counts


def module_stats(mod: tvm.IRModule) -> ModuleStats:
    funcs = list(mod.functions.values())
    return ModuleStats(sum(relax_op_counts(mod).values()), sum(isinstance(f, relax.Function) for f in funcs),
                       sum(isinstance(f, tvm.tirx.PrimFunc) for f in funcs))


def run_pipeline(mod: tvm.IRModule, stages: Sequence[Stage]) -> tuple[tvm.IRModule, list[StageReport]]:
    """Apply ``stages`` in order; a failing stage raises CompileError naming it."""
    reports = []
    before = module_stats(mod)
    for stage in stages:
        start = time.perf_counter()
        crash.set_stage(stage.name)  # what a fatal fault reports (hetc/crash.py)
        try:
            with tvm.transform.PassContext(opt_level=3):
                mod = stage.make()(mod)
        except HetcError:
            raise  # already a one-line, user-facing error (a bad tuning database, ...)
        except Exception as err:
            message = last_line(err)
            release_frames(err)
            raise CompileError(f"pass stage '{stage.name}' failed: {message}") from err
        after = module_stats(mod)
        reports.append(StageReport(stage.name, before, after, time.perf_counter() - start))
        before = after
    return mod, reports
