"""(converters of this family are added here)"""

from __future__ import annotations
