"""What the kernel tests read in a compiled kernel's PTX."""

from __future__ import annotations

import re

#: A global load of one 2-byte element (``ld.global...b16``).
_ELEMENT_LOAD = re.compile(r"ld\.global[.\w]*\.b16\b")


def element_loads(ptx: str) -> int:
    """Global loads of one 2-byte element in ``ptx``: a bf16 tile loaded element by element
    where the served variant loads it in vectors."""
    return len(_ELEMENT_LOAD.findall(ptx))
