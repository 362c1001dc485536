"""Backends, one folder per target. Importing this package registers the built-in targets.

Add a backend by importing its package here (see ``hetc.targets`` for what it must provide).
"""

from . import ascend, cpu, cuda, fpga  # noqa: F401
