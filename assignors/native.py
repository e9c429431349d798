"""The C kernels of rack-aware placement (``assignors/_placement.c``), or None where the module
was not built (pip builds it: setup.py). Each kernel stands in for Python that stays beside it,
exact, as its reference: the modules that use one (``plan``, ``racks_range``,
``racks_uniform``) bind ``kernels`` as their ``_placement`` and run that Python when it is
None (tests/unit/test_placement_native.py turns a module's off the same way)."""

from __future__ import annotations

from types import ModuleType

kernels: ModuleType | None
try:
    from assignors import _placement as kernels
except ImportError:  # a source tree nobody built
    kernels = None

__all__ = ["kernels"]
