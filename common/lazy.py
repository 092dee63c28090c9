"""Names a package imports on first use (PEP 562), so that importing it costs nothing.

Introduced in chapters/01_pytorch_basics.ipynb.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_names(package: str, where: dict[str, str], namespace: dict) -> tuple[Callable, Callable]:
    """``__getattr__`` and ``__dir__`` for a package whose name ``n`` lives in module ``where[n]``.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """

    def __getattr__(name: str):  # the PEP 562 hook
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # the next lookup is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__
