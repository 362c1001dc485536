"""hetc's ATen converters, one op family per file (see ``registry.py`` to add one).
Importing a file registers its converters: the list below is the whole registry."""

from . import reduce, tensor  # noqa: F401
