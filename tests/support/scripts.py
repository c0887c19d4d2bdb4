"""Loading a repository script (``benchmarks/...``, not a package module) as a module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def load_script(relative_path: str) -> ModuleType:
    """Import ``REPO/relative_path`` under its file's stem (kept in ``sys.modules``, where
    dataclasses look their module up)."""
    path = REPO / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module
