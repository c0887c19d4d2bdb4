"""Tier 2: extensions, file names, patterns and directories."""

from __future__ import annotations

from registry.dispatch.catalogue import parse_files
from registry.dispatch.files import MAX_PATHS, FileMatcher, normalize_path


def _matcher() -> FileMatcher:
    return FileMatcher(
        [
            *parse_files(".py|requirements.txt|conftest.py", "python"),
            *parse_files("test_*.py|tests/=0.5", "testing"),
            *parse_files("dockerfile=1.5|dockerfile.*=1.5|.dockerignore", "docker"),
            *parse_files(".github/workflows/=1.5", "ci/cd"),
            *parse_files(".md=0.7|readme.md=1.6|readme=1.6", "documentation"),
            *parse_files(".tf=1.3", "terraform"),
        ]
    )


def _found(refs: list[str], mentioned: list[str] | None = None) -> dict[str, float]:
    hits = _matcher().match(refs, mentioned or [])
    out: dict[str, float] = {}
    for hit in hits:
        out[hit.domain] = max(out.get(hit.domain, 0.0), hit.weight)
    return out


def test_extension_name_pattern_directory() -> None:
    assert _found(["src/app.py"]) == {"python": 1.0}
    assert _found(["tests/test_auth.py"]) == {"python": 1.0, "testing": 1.0}
    assert _found(["Dockerfile"]) == {"docker": 1.5}
    assert _found(["Dockerfile.dev"]) == {"docker": 1.5}
    assert _found([".github/workflows/release.yml"]) == {"ci/cd": 1.5}
    assert _found(["main.tf"]) == {"terraform": 1.3}
    assert _found(["README.md"]) == {"documentation": 1.6}  # the name beats the extension
    assert _found(["notes/trip.md"]) == {"documentation": 0.7}


def test_paths_mentioned_in_the_objective_count_too() -> None:
    assert _found([], [".tf"]) == {"terraform": 1.3}
    assert _found([], ["src/x.py"]) == {"python": 1.0}


def test_unknown_files_give_nothing() -> None:
    assert _found(["budget.xlsx", "lease.pdf", "notes.txt"]) == {}


def test_windows_and_relative_paths_are_normalised() -> None:
    assert normalize_path(r"C:\work\Src\App.PY") == "work/src/app.py"
    assert normalize_path("./src/a.py") == "src/a.py"
    assert normalize_path("~/.bashrc") == ".bashrc"
    assert _found([r"C:\repo\tests\test_x.py"]) == {"python": 1.0, "testing": 1.0}


def test_the_same_path_counts_once_and_the_number_of_paths_is_bounded() -> None:
    assert len(_matcher().match(["a.py", "./a.py", "A.PY"])) == 1
    many = [f"f{i}.py" for i in range(10 * MAX_PATHS)]
    assert len(_matcher().match(many)) == MAX_PATHS
