"""Tokenizer: words, compound tokens, paths and the linear-time guarantee."""

from __future__ import annotations

import time

import pytest

from registry.dispatch.tokens import extension_of, is_path, split_words, tokenize


def test_cpp_and_csharp_stay_whole_and_c_stays_alone() -> None:
    tokens = tokenize("Port this C++ code to C, or maybe C#? Compile with g++ -std=c++20.")
    assert "c++" in tokens.words
    assert "c#" in tokens.words
    assert "g++" in tokens.words
    assert "c" in tokens.words
    assert tokens.words.count("c++") == 2  # "C++" and the "c++" of "c++20"
    assert "20" in tokens.words


def test_compounds_keep_inner_punctuation_and_lose_sentence_punctuation() -> None:
    tokens = tokenize("Our CI/CD (GitHub) runs on k8s, with node.js; see std::vector.")
    assert "ci/cd" in tokens.compounds
    assert "node.js" in tokens.compounds
    assert "std::vector" in tokens.compounds
    assert "k8s" in tokens.words
    assert "ci" in tokens.words
    assert "cd" in tokens.words


def test_an_extension_is_a_path_not_a_word() -> None:
    dotted = tokenize("rename every .py file")
    plain = tokenize("the py launcher on windows")
    assert ".py" in dotted.paths
    assert "py" not in dotted.words
    assert "py" in plain.words
    assert plain.paths == ()


def test_paths_file_names_and_globs() -> None:
    text = (
        "See src/list.c:57, the Dockerfile, *.tf files, .github/workflows/ci.yml, "
        "~/.bashrc and the k8s/ folder."
    )
    paths = tokenize(text).paths
    assert "src/list.c" in paths  # without its line number
    assert "dockerfile" in paths
    assert ".tf" in paths
    assert ".github/workflows/ci.yml" in paths
    assert ".bashrc" in paths
    assert "k8s/" in paths


def test_words_of_a_path_are_not_prose_words() -> None:
    tokens = tokenize("summarize docs/lease_agreement.pdf for me")
    assert "docs/lease_agreement.pdf" in tokens.paths
    assert "docs" not in tokens.words
    assert "summarize" in tokens.words


def test_not_paths() -> None:
    for chunk in ("ci/cd", "html/css", "and/or", "3.11", "e.g", "df.groupby"):
        assert not is_path(chunk), chunk
    for chunk in ("app.py", "makefile", ".env", "a/b/c", "/etc/hosts"):
        assert is_path(chunk), chunk


def test_extension_of() -> None:
    assert extension_of("src/a.test.ts") == "ts"
    assert extension_of(".bashrc") == "bashrc"
    assert extension_of("Makefile") == ""
    assert extension_of("k8s/") == ""


def test_code_like() -> None:
    assert tokenize("const x = () => { return 1; }").code_like
    assert tokenize("call read_csv then to_parquet").code_like
    assert not tokenize("what should I cook tonight").code_like
    assert tokenize("pandas merge_asof drops the last quote").code_like  # one snake_case name
    assert not tokenize("my iPhone and my MacBook do not pair").code_like  # brands, not code


def test_split_words_matches_tokenize() -> None:
    assert split_words("Data Pipelines") == ("data", "pipelines")
    assert split_words("c++") == ("c++",)


def test_linear_time_on_a_megabyte() -> None:
    unit = "optimize the c++ kernel in src/a.cu and ci/cd, then print(x) " * 16
    small = unit * 100
    big = unit * 1000  # about 1 MB
    started = time.perf_counter()
    tokenize(small)
    small_s = time.perf_counter() - started
    started = time.perf_counter()
    tokens = tokenize(big)
    big_s = time.perf_counter() - started
    assert len(big) > 900_000
    assert len(tokens.words) > 100_000
    assert big_s < 5.0
    assert big_s < 30 * max(small_s, 1e-3)  # ten times the input, not a hundred times the time


def test_command_line_flags_are_compounds_not_words() -> None:
    tokens = tokenize("docker run --gpus all --restart=always")
    assert "--gpus" in tokens.compounds
    assert "gpus" not in tokens.words
    assert "docker" in tokens.words


def test_a_pasted_dockerfile_is_marked() -> None:
    snippet = "FROM python:3.11-slim\nWORKDIR /app\nCOPY . .\nRUN pip install -r requirements.txt"
    assert "dockerfile-syntax" in tokenize(snippet).compounds
    assert "dockerfile-syntax" not in tokenize("from here we run to the shop").compounds


@pytest.mark.parametrize(
    ("snippet", "marker"),
    [
        ("rows = [[0] * 2] * 2\nrows[0][1] = 5\nprint(rows)  # both rows change", "python-syntax"),
        ("def area(r):\n    return 3.14 * r * r\nprint(area(2))", "python-syntax"),
        ("const sum = xs.reduce((a, b) => a + b, 0);", "javascript-syntax"),
        ('#include <stdio.h>\nint main(void) { printf("%d", 1); }', "c-syntax"),
        ("SELECT id, total\nFROM orders\nWHERE total > 10", "sql-syntax"),
        ("is this loop O(n log n) or O(n^2)?", "complexity-notation"),
    ],
)
def test_pasted_code_is_marked_by_its_language(snippet: str, marker: str) -> None:
    compounds = tokenize(snippet).compounds
    assert marker in compounds
    others = {"python-syntax", "javascript-syntax", "c-syntax", "sql-syntax"} - {marker}
    assert not others & set(compounds)


@pytest.mark.parametrize(
    "prose",
    [
        "I print(ed) the report twice # oops",
        "select a gift from the shop, then order it",
        "Oh (no), the include list for the party is long",
        "for dinner we had pasta: it was great",
    ],
)
def test_prose_is_not_marked_as_code(prose: str) -> None:
    assert not [c for c in tokenize(prose).compounds if c.endswith(("-syntax", "-notation"))]
