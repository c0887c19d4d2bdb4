"""Tier 2: file extensions, file names, name patterns and directories.

Owns :class:`FileMatcher`, compiled from the file rules of every domain in play, and its
:meth:`FileMatcher.match` over the task's ``context_refs`` and the paths the objective mentions
(``Dockerfile``, ``*.tf``, ``.github/workflows/release.yml``, ``src/list.c``). A path yields, per
domain, its strongest rule (``tests/test_auth.py`` counts for python through ``.py`` and for
testing through ``test_*.py``). Linear in the number and length of the paths.

Imports only the standard library.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from registry.dispatch.catalogue import FileRule
from registry.dispatch.tokens import extension_of

#: At most this many paths are examined per task.
MAX_PATHS = 128
#: Longest path examined (characters).
MAX_PATH_CHARS = 1024


@dataclass(frozen=True)
class FileHit:
    """A rule that matched a path."""

    path: str
    rule: FileRule

    @property
    def domain(self) -> str:
        return self.rule.domain

    @property
    def weight(self) -> float:
        return self.rule.weight


def normalize_path(path: str) -> str:
    """Lowercase, forward slashes, without quotes, ``./`` and a leading ``~/``."""
    text = path.strip().strip("\"'`").replace("\\", "/").lower()
    text = re.sub(r"^(?:[a-z]:/|~/|\./|/)+", "", text)
    return text


class FileMatcher:
    """Lookup tables for a set of file rules; immutable after construction."""

    def __init__(self, rules: Iterable[FileRule]) -> None:
        self._extensions: dict[str, list[FileRule]] = {}
        self._names: dict[str, list[FileRule]] = {}
        self._patterns: list[tuple[re.Pattern[str], FileRule]] = []
        self._directories: list[FileRule] = []
        for rule in rules:
            if rule.kind == "extension":
                self._extensions.setdefault(rule.text[1:], []).append(rule)
            elif rule.kind == "name":
                self._names.setdefault(rule.text, []).append(rule)
            elif rule.kind == "pattern":
                self._patterns.append((re.compile(fnmatch.translate(rule.text)), rule))
            else:
                self._directories.append(rule)

    def match(self, refs: Sequence[str], mentioned: Sequence[str] = ()) -> list[FileHit]:
        """Per path and domain the strongest rule, for ``refs`` then ``mentioned`` paths."""
        hits: list[FileHit] = []
        seen: set[str] = set()
        for raw in (*refs[:MAX_PATHS], *mentioned[:MAX_PATHS]):
            path = normalize_path(raw[:MAX_PATH_CHARS])
            if not path or path in seen:
                continue
            seen.add(path)
            best: dict[str, FileRule] = {}
            for rule in self._rules_for(path):
                current = best.get(rule.domain)
                if current is None or rule.weight > current.weight:
                    best[rule.domain] = rule
            hits.extend(FileHit(path, rule) for rule in best.values())
        return hits

    def _rules_for(self, path: str) -> list[FileRule]:
        is_directory = path.endswith("/")
        stripped = path.rstrip("/")
        base = "" if is_directory else stripped.rsplit("/", 1)[-1]
        found: list[FileRule] = []
        if base:
            found += self._names.get(base, [])
            stem = base.split(".", 1)[0]
            if stem != base and not base.startswith("."):
                found += self._names.get(stem, [])  # README.rst, Dockerfile.dev
            ext = extension_of(base)
            if ext and base != ext:
                found += self._extensions.get(ext, [])
            found += [rule for pattern, rule in self._patterns if pattern.match(base)]
        directory = "/" + (stripped if is_directory else stripped.rpartition("/")[0]) + "/"
        if directory != "//":
            found += [rule for rule in self._directories if "/" + rule.text in directory]
        return found
