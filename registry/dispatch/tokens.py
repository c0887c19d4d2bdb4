"""The tokenizer of the lexical tiers: words, compound tokens and file references.

Owns how an objective is cut into what tiers 1 and 2 look up, in one linear pass:

- ``words``: lowercase runs of letters, digits and ``_`` in prose; ``c++``, ``g++``, ``c#`` and
  ``f#`` stay whole (``c++20`` gives ``c++`` and ``20``);
- ``compounds``: whitespace-delimited chunks with their inner punctuation kept (``ci/cd``,
  ``node.js``, ``std::vector``, ``.py``, ``k8s``), trimmed of sentence punctuation;
- ``paths``: the compounds that name a file, a path or a bare extension (``src/list.c``,
  ``Dockerfile``, ``*.tf``, ``.github/workflows/ci.yml``, ``~/.bashrc``); their words are not
  prose words, so ``docs/lease.pdf`` says ``docs`` only to tier 2;
- ``code_like``: whether the text carries code punctuation or identifiers (used to corroborate
  keywords that also have an everyday sense);
- dialect markers: a pasted Dockerfile (``FROM``/``RUN``/``COPY`` lines) adds the compound
  ``dockerfile-syntax``.

Imports only the standard library.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: A chunk: letters, digits and the punctuation that can sit inside a technical token.
_CHUNK = re.compile(r"[\w.+#/:\-@~*$]+")
#: A word inside a chunk; ``++`` and ``#`` stay attached (c++, c#).
_WORD = re.compile(r"[^\W_][\w]*(?:\+\+|#)?|_+[^\W_][\w]*")
#: An identifier that only code has: snake_case, camelCase, dunder.
#: (camelCase counts from a lowercase start of two letters: ``useEffect``, ``getById``; brands
#: such as ``iPhone``, ``MacBook`` or ``YouTube`` do not.)
_IDENTIFIER = re.compile(r"[a-z0-9]_[a-z0-9]|\b[a-z]{2,}[A-Z]|__\w")
#: A snake_case name with letters on both sides of the underscore (``merge_asof``, not ``_1``).
_SNAKE_CASE = re.compile(r"\b[a-z][a-z0-9]*_[a-z][a-z0-9_]*\b")
#: A line (and column) number after a file name: ``list.c:57``, ``app.py:12:5``.
_LINE_SUFFIX = re.compile(r"(?::\d+)+$")
#: Dialect markers: a pasted snippet in a recognisable file format adds a compound token
#: (``dockerfile-syntax``) that the catalogue can weigh. (name, pattern, minimum matches)
_MARKERS = (
    (
        "dockerfile-syntax",
        re.compile(
            r"^[ \t]*(?:FROM|RUN|COPY|CMD|ENTRYPOINT|WORKDIR|EXPOSE|ADD|ARG|ENV|USER)[ \t]+\S",
            re.MULTILINE,
        ),
        2,
    ),
    (
        # print(...) without a semicolon, def/class/import lines, block headers ending in a colon,
        # an inline "# comment" after code
        "python-syntax",
        re.compile(
            r"\bprint\([^;\n]*\)(?=[ \t]*(?:#|$))|^[ \t]*(?:def|class)[ \t]+\w+[^\n]*:[ \t]*$|"
            r"^[ \t]*(?:import[ \t]+\w+|from[ \t]+[\w.]+[ \t]+import\b)|"
            r"^[ \t]*(?:elif|for|while|if|with|try|except)\b[^\n;{]*:[ \t]*$|"
            r"(?<=[\w)\]])[ \t]+#[ \t]",
            re.MULTILINE,
        ),
        2,
    ),
    (
        "javascript-syntax",
        re.compile(
            r"\b(?:const|let|var)[ \t]+\w+[ \t]*=|=>|\bconsole\.log\(|\bfunction[ \t]*\w*[ \t]*\(|"
            r"\bdocument\.\w+|\b(?:module\.exports|require\(['\"])",
        ),
        2,
    ),
    (
        "c-syntax",
        re.compile(
            r"^[ \t]*#[ \t]*(?:include|define)\b|\b(?:printf|malloc|free|memcpy|strncpy|sizeof)\(|"
            r"\b(?:int|void|char|unsigned|size_t)[ \t]+\*?\w+[ \t]*\(|std::",
            re.MULTILINE,
        ),
        2,
    ),
    (
        # big-O notation: O(n^2), O(n log n), Θ(n), O(1)
        "complexity-notation",
        re.compile(r"(?<![\w.])[OΘΩ]\((?:1|[a-z](?:[\^*+ ]|log|\w|\d){0,12})\)"),
        1,
    ),
    (
        "sql-syntax",
        re.compile(
            r"^[ \t]*(?:SELECT|FROM|WHERE|GROUP BY|ORDER BY|JOIN|INSERT INTO|UPDATE)\b",
            re.MULTILINE,
        ),
        2,
    ),
)
#: Markers are looked for in this much of the text.
_MARKER_CHARS = 20_000
#: Code punctuation counted for ``code_like``.
_CODE_PUNCT = ("{", "}", ";", "=>", "==", "()", "->", "::", "!=", "[]")

#: Names that are files whatever their case and without an extension.
FILE_NAMES = frozenset(
    {
        "dockerfile",
        "containerfile",
        "makefile",
        "gnumakefile",
        "jenkinsfile",
        "vagrantfile",
        "procfile",
        "gemfile",
        "rakefile",
        "pipfile",
        "brewfile",
        "justfile",
        "caddyfile",
    }
)

#: Extensions that make a chunk a file reference (the files tier maps some of them to
#: domains; the rest are files nonetheless, e.g. ``lease.pdf``).
_EXTENSIONS = """
    py pyi pyx pxd ipynb cu cuh ptx c h cc cpp cxx hpp hh hxx inl s asm ld js mjs cjs jsx ts
    tsx mts cts vue svelte html htm css scss sass less sql parquet csv tsv avro orc jsonl ndjson
    json yaml yml toml ini cfg conf env sh bash zsh fish ps1 bat md markdown mdx rst adoc txt tex
    bib lean tf tfvars hcl rs go java kt kts scala swift cs csproj sln fs rb php pl r jl lua dart
    ex exs erl hs ml clj gradle xml proto graphql gql service timer socket lock xlsx xls ods numbers
    pdf doc docx ppt pptx odt key pages png jpg jpeg gif svg webp mp4 mov zip gz tgz tar whl jar
    war so dylib dll o a exe bin log patch diff dockerfile mk cmake pc def map wasm
"""
FILE_EXTENSIONS = frozenset(_EXTENSIONS.split())


@dataclass(frozen=True)
class Tokens:
    """An objective cut for the lexical tiers (see the module docstring)."""

    words: tuple[str, ...]
    compounds: tuple[str, ...]
    paths: tuple[str, ...]
    code_like: bool


def _trim(chunk: str) -> str:
    """Strip sentence punctuation around a chunk, keeping a leading ``.`` of ``.py``/``.env``."""
    chunk = chunk.rstrip(".,:;-/*~@$")
    while chunk and chunk[0] in ",:;-*~@$/":
        chunk = chunk[1:]
    while chunk.startswith("./") or chunk.startswith("../"):
        chunk = chunk[chunk.index("/") + 1 :]
    if chunk.startswith(".") and not (len(chunk) > 1 and chunk[1].isalnum()):
        chunk = chunk.lstrip(".")
    return chunk


def extension_of(name: str) -> str:
    """The lowercase extension of a file name or path (``"src/a.test.ts"`` -> ``"ts"``)."""
    base = name.rstrip("/").rsplit("/", 1)[-1].lower()
    if "." not in base.lstrip("."):
        return base[1:] if base.startswith(".") else ""
    return base.rsplit(".", 1)[1]


def is_path(chunk: str) -> bool:
    """Whether a trimmed, lowercase chunk names a file, a directory path or an extension."""
    if not chunk:
        return False
    base = chunk.rstrip("/").rsplit("/", 1)[-1]
    if base in FILE_NAMES or base.split(".", 1)[0] in FILE_NAMES:
        return True
    if base.startswith(".") and base[1:].replace("-", "").replace("_", "").isalnum():
        return True  # a bare extension (.py) or a dotfile (.bashrc, .github)
    ext = extension_of(base)
    if ext in FILE_EXTENSIONS and base != "." + ext and "." in base:
        return True
    if "/" in chunk:
        return chunk.count("/") >= 2 or chunk.startswith(("/", ".", "~")) or "." in base
    return False


def tokenize(text: str) -> Tokens:
    """Cut ``text`` into words, compounds and paths (linear in ``len(text)``)."""
    words: list[str] = []
    compounds: list[str] = []
    paths: list[str] = []
    for raw in _CHUNK.findall(text.lower()):
        if raw.isalnum() and raw not in FILE_NAMES:  # the common case: a plain word
            compounds.append(raw)
            words.append(raw)
            continue
        if raw.startswith("--") and raw[2:].replace("-", "").isalnum():
            compounds.append(raw)  # a command-line flag (--gpus): command syntax, not prose
            continue
        ends_with_slash = raw.endswith("/")
        chunk = _trim(raw)
        if not chunk:
            continue
        compounds.append(chunk)
        located = _LINE_SUFFIX.sub("", chunk)  # src/list.c:57:3 -> src/list.c
        if is_path(located) or (ends_with_slash and len(chunk) > 1 and "/" not in chunk):
            paths.append(chunk + "/" if ends_with_slash and not chunk.endswith("/") else located)
            continue
        words.extend(_WORD.findall(chunk))
    head = text[:_MARKER_CHARS]
    for name, pattern, minimum in _MARKERS:
        if sum(1 for _ in zip(range(minimum), pattern.finditer(head), strict=False)) >= minimum:
            compounds.append(name)
    return Tokens(tuple(words), tuple(compounds), tuple(paths), _code_like(text))


def _code_like(text: str) -> bool:
    head = text[:20_000]
    punct = sum(head.count(mark) for mark in _CODE_PUNCT)
    if punct >= 2 or _SNAKE_CASE.search(head) is not None:
        return True  # one snake_case name (``merge_asof``) is code; prose has none
    return len(_IDENTIFIER.findall(head)) >= 2  # camelCase alone may be a brand (iPhone)


def split_words(text: str) -> tuple[str, ...]:
    """The words of a keyword or a domain name, as :func:`tokenize` would find them."""
    return tuple(_WORD.findall(text.lower()))
