"""Auto-tuning: MetaSchedule search with the XGBoost cost model, and the tuning database.

    hetc tune model.onnx --target cpu --trials 500 --db model.tuning
    hetc compile model.onnx --db model.tuning -o build/

One concern per module:

- ``tasks``: which targets can be tuned; a model's tasks (distinct fused PrimFuncs) and weights
- ``budget``: spreading the trial budget over tasks (and what is left when resuming)
- ``search``: running MetaSchedule (builder, runner, cost model, evolutionary search)
- ``worker``: the functions MetaSchedule's worker processes run
- ``progress``: the live display, fed by a MetaSchedule measure callback
- ``database``: the on-disk database: create, lock, repair, validate, apply (``compile --db``)
- ``specialize``: a symbolic kernel at representative sizes (the tasks of a dynamic model)
- ``replay``: a record's schedule on the symbolic kernel (``compile --db`` of a dynamic model)
- ``symbolic_check``: replayed records vs default schedules, measured on the symbolic kernels
- ``tuner``: ``tune()``, which ties them together

User documentation: docs/tuning.md.
"""

from __future__ import annotations

__all__ = ["TaskResult", "TuneResult", "tune"]


def __getattr__(name: str):
    # tuner imports TVM and the frontend; load it on first use (the database pass imports this
    # package during every `compile --db`).
    if name in __all__:
        from . import tuner

        return getattr(tuner, name)
    raise AttributeError(f"module 'hetc.tuning' has no attribute {name!r}")
