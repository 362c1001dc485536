"""Graph pass pipeline: stages, phases and per-stage reports."""

from .pipeline import ModuleStats, Stage, StageReport, module_stats, run_pipeline

__all__ = ["ModuleStats", "Stage", "StageReport", "module_stats", "run_pipeline"]
