"""``x @ permute_dims(k)`` (the last two axes swapped) as one kernel that reads ``k`` in place.

This is TVM's ``FuseTransposeMatmul`` with one more condition: the transposed ``k`` has no
reader but the matmul. TVM's pass fuses the pair even where the transpose is read elsewhere
too; the fused function must then return the transpose as well, a tuple, and the pass's codegen
reads the ``dtype`` of that tuple and fails. timm's ``lambda_resnet26t`` did not compile: its
lambda layer multiplies by the transposed values and also reshapes them for its positional
term. Where the transpose is shared it stays a kernel of its own, and the matmul reads its
output.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.transform import fuse_transpose_matmul as _tvm


def _only_reader(check):
    """``check`` (TVM's: the permutation swaps the last two axes), and the transposed tensor is
    read by nothing but the matched matmul."""
    def checked(context: relax.transform.PatternCheckContext) -> bool:
        if not check(context):
            return False
        var = context.value_to_bound_var.get(context.annotated_expr["wT"])
        return var is None or len(context.var_usages.get(var, [])) <= 1
    return checked


@tvm.transform.module_pass(opt_level=0, name="HetcFuseTransposeMatmul")
def fuse_transpose_matmul_pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """TVM's ``FuseTransposeMatmul`` where the transpose has one reader (module docstring)."""
    pattern, annotations, check = _tvm._pattern()  # pylint: disable=protected-access
    mod = relax.transform.FuseOpsByPattern(
        [("transpose_matmul_fuse", pattern, annotations, _only_reader(check))], bind_constants=False)(mod)
    fuser = _tvm._TransposeMatmulFuser(mod)  # pylint: disable=protected-access
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            fuser.builder_.update_func(gvar, fuser.visit_expr(func))
    return fuser.builder_.get()
