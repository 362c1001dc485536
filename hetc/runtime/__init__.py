"""Artifact format and execution: ``CompiledModel``, ``load``."""

from .artifact import SCHEMA_VERSION, Manifest, Part
from .model import CompiledModel, load

__all__ = ["SCHEMA_VERSION", "CompiledModel", "Manifest", "Part", "load"]
