"""Public names that load on first use (PEP 562), for the packages that re-export them.

``txnlog`` and ``txnlog.log_format`` re-export the names users meet, yet importing either must
stay cheap: every ``import txnlog.<anything>`` runs both ``__init__`` files first, and the
defining modules pull in pyarrow, numba or s3fs. So each package maps a public name to the
module that defines it, and its module-level ``__getattr__`` imports that module only when
the name is first asked for, then caches the value in the package's namespace.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``exports`` maps a public name to its
    defining module (absolute, or relative to ``package`` when it starts with a dot)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        vars(sys.modules[package])[name] = value  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
