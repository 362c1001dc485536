"""The Relax-to-VM lowering every hetc build runs (``tvm.compile``'s ``relax_pipeline``).

TVM's ``relax.pipeline.default_build_pipeline``, with two changes:

- the reshapes still ``R.reshape`` when it runs (those between symbolic shapes, which hetc's
  legalization keeps: ``phases._symbolic_reshape_as_view``) stay so, and the VM runs them as
  views. TVM's ``LegalizeOps`` would make each an unscheduled copy kernel, and
  ``RewriteDataflowReshape`` turns back only those whose index arithmetic it recognizes
  (wav2vec2-conformer's TorchScript export: two such copies were 1.1 ms of its 2 ms on a 2-core Zen 5, AVX-512);
- ``StaticPlanBlockMemory`` can be left out (``plan_memory=False``): it lets two vdevices of
  one device type share storage, and the VM then fails at run time (``placement/apply.build``).
"""

from __future__ import annotations

import tvm
from tvm import relax


def vm_pipeline(plan_memory: bool = True) -> tvm.transform.Pass:
    t = relax.transform
    return tvm.transform.Sequential([
        relax.backend.DispatchSampling(), relax.backend.DispatchSortScan(),
        t.LegalizeOps({"relax.reshape": lambda _bb, call: call}),
        t.RewriteDataflowReshape(), t.ToNonDataflow(), t.RemovePurityChecking(), t.CallTIRRewrite(),
        *([t.StaticPlanBlockMemory()] if plan_memory else []),
        t.RewriteCUDAGraph(), t.LowerAllocTensor(), t.KillAfterLastUse(), t.LowerRuntimeBuiltin(),
        t.ComputePrimValue(), t.VMShapeLower(), t.AttachGlobalSymbol()])
