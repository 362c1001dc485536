"""The disco worker process of a one-machine parallel run (``runtime.ParallelRunner``).

A disco ``ProcessSession`` started with ``entrypoint="hetc.parallel.worker"`` runs this module
in every worker process but worker 0 (a thread of the controller, which installs the same
functions itself). Before entering TVM's worker loop it registers the gloo collectives
(``gloo.install``) and ``hetc.parallel.load``/``run`` (``runtime.install``), which the
controller then calls on all workers at once. Ranks launched as plain processes, possibly on
several machines, start from ``launch.py`` instead.
"""

from __future__ import annotations

import sys

from tvm_ffi import get_global_func

from . import gloo, runtime


def main() -> None:
    """Disco worker process: ``<worker_id> <num_workers> <num_groups> <read_fd> <write_fd>``."""
    runtime.disco()  # loads TVM's runtime, which defines the worker loop
    gloo.install()
    runtime.install()
    worker_id, num_workers, num_groups, reader, writer = (int(a) for a in sys.argv[1:6])
    get_global_func("runtime.disco.WorkerProcess")(worker_id, num_workers, num_groups, reader, writer)


if __name__ == "__main__":
    try:
        main()
    except (OSError, KeyboardInterrupt):
        pass
