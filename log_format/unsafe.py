"""Old name of ``planted_bugs`` (kept while modules still import it; remove when none do).

"unsafe" read as memory-unsafe; the module holds the chaos harness's planted-bug switches.
"""

from __future__ import annotations

from .planted_bugs import ENV, NAMES, enabled

__all__ = ["ENV", "NAMES", "enabled"]
