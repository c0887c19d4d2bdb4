"""Validate the dispatcher evaluation set ``tasks.jsonl`` and print its counts.

Standard library only. Checks the schema, unique ids, labels (one of the eight seed specialists
or null), tag consistency, the ``no-signal`` rules, the minimum sizes, and that the ``split``
field is exactly the seeded, stratified 30 % hold-out that ``expected_split`` computes (so no
task was moved between ``tune`` and ``heldout`` by hand).

A held-out-only file such as ``heldout_v3.jsonl`` (every id is ``h`` + 4 digits) is checked by
the same per-task rules, but instead of the seeded split it must have every ``split`` equal to
``heldout``, its own minimum sizes, and no id or objective (normalised whitespace and case)
shared with any other set (``--against``, repeatable; default: ``tasks.jsonl`` and every other
``heldout_*.jsonl`` beside it).

Run: ``.venv/bin/python benchmarks/dispatch/data/check_tasks.py [--data PATH] [--assign-split]``
(PATH may also be given positionally; the default is ``tasks.jsonl``).

``--assign-split`` rewrites the ``split`` field of every task in PATH from ``expected_split``;
use it after adding or relabelling tasks, never to move a single task. It refuses a held-out file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

DEFAULT_PATH = Path(__file__).resolve().parent / "tasks.jsonl"

# The seed specialists (seed 001, "Specialist Fleet"): name -> registered domains.
FLEET: dict[str, tuple[str, ...]] = {
    "python-lora": ("python", "debugging", "testing"),
    "cuda-lora": ("cuda", "gpu optimization"),
    "math-lora": ("math", "algorithms", "proofs"),
    "systems-lora": ("c", "c++", "low-level"),
    "web-lora": ("javascript", "typescript", "html/css"),
    "data-lora": ("sql", "pandas", "data pipelines"),
    "devops-lora": ("docker", "k8s", "ci/cd", "shell"),
    "docs-lora": ("documentation", "markdown"),
}
NULL_KEY = "null"  # how a null label is shown and grouped

SPLIT_SEED = "hi-moe-lora/dispatch-tasks/v1"
HELDOUT_FRACTION = 0.30
MAX_LABEL_DEVIATION = 0.05  # per label, in fraction of that label's tasks
MIN_TASKS = 300
MIN_NO_SIGNAL = 60
MIN_OVERLAP = 40

REQUIRED_FIELDS = ("id", "objective", "context_refs", "label", "split", "tags")
OPTIONAL_FIELDS = ("why",)
TAGS = frozenset(
    {
        "keyword",
        "file-ref",
        "file-in-text",
        "no-signal",
        "overlap",
        "decoy",
        "stack-trace",
        "code",
        "unrelated",
    }
)
ID_RE = re.compile(r"^t\d{4}$")

# A held-out-only file (heldout_v*.jsonl): written after the main set, never tuned on.
HELDOUT_ID_PREFIX = "h"
HELDOUT_ID_RE = re.compile(r"^h\d{4}$")
HELDOUT_MIN_TASKS = 200
HELDOUT_MIN_NO_SIGNAL = 45
HELDOUT_MIN_OVERLAP = 40

# A no-signal objective names no technology: none of these words may appear in it ...
NO_SIGNAL_DENY_GROUPS = (
    "python pytest pip django flask numpy debug debugging test tests testing",
    "cuda gpu nvidia kernel tensor",
    "math theorem proof prove algorithm complexity",
    "c++",  # and the language C, see below
    "javascript typescript html css react node",
    "sql postgres mysql pandas pipeline",
    "docker kubernetes k8s helm ci/cd shell bash",
    "markdown documentation docs readme docstring",
    "api json yaml",
)
NO_SIGNAL_DENY = tuple(word for group in NO_SIGNAL_DENY_GROUPS for word in group.split())
NO_SIGNAL_DENY_RE = re.compile(
    r"(?<![\w+/])(" + "|".join(re.escape(w) for w in NO_SIGNAL_DENY) + r")(?![\w+])"
    r"|(?<![\w'])c(?![\w+#'])",  # the language C as a word of its own
    re.IGNORECASE,
)
# ... and nothing that looks like a file name, a path or an extension.
# (Product names such as Node.js and method calls such as r.json() are not file names.)
FILE_TOKEN_RE = re.compile(
    r"(?<![\w.-])(?!(?:Node|Next|Vue|Nuxt|Express)\.js\b)"
    r"(?:[\w.-]*/)*[\w-]*\.(?:py|pyx|ipynb|cu|cuh|c|cc|cpp|h|hpp|js|jsx|ts|tsx|css|html|sql|"
    r"md|rst|tex|yml|yaml|json|toml|tf|sh|txt|cfg|ini|xlsx|pdf)\b(?!\()"
    r"|\b(?:Dockerfile|Makefile|CMakeLists\.txt|Jenkinsfile|README)\b"
    r"|(?<![\w.])\.(?:bashrc|dockerignore|gitignore|env)\b"
)


def label_key(label: str | None) -> str:
    """The grouping key of a label (``null`` for the base-model fallback)."""
    return NULL_KEY if label is None else label


def _order_key(task_id: str) -> str:
    return hashlib.sha256(f"{SPLIT_SEED}:{task_id}".encode()).hexdigest()


def expected_split(tasks: list[dict[str, Any]]) -> dict[str, str]:
    """The split of every task id: a seeded shuffle per label, the first ~30 % held out.

    Each label's tasks are ordered by SHA-256 of ``SPLIT_SEED:id`` (a fixed seeded shuffle
    that does not depend on file order); the first ``quota`` of each order are ``heldout``.
    Quotas are 30 % of each label's count, rounded by largest remainder so that the total is
    ``round(0.3 * N)`` exactly (ties go to the label whose name sorts first).
    """
    groups: dict[str, list[str]] = {}
    for task in tasks:
        groups.setdefault(label_key(task["label"]), []).append(task["id"])
    total = round(HELDOUT_FRACTION * len(tasks))
    exact = {key: HELDOUT_FRACTION * len(ids) for key, ids in groups.items()}
    quota = {key: int(value) for key, value in exact.items()}
    by_remainder = sorted(exact, key=lambda key: (-(exact[key] - quota[key]), key))
    for key in by_remainder[: total - sum(quota.values())]:
        quota[key] += 1
    split: dict[str, str] = {}
    for key, ids in groups.items():
        for rank, task_id in enumerate(sorted(ids, key=_order_key)):
            split[task_id] = "heldout" if rank < quota[key] else "tune"
    return split


def load(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Parse the JSONL file; returns the objects and the parse errors."""
    tasks: list[dict[str, Any]] = []
    errors: list[str] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            errors.append(f"line {number}: empty line")
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(f"line {number}: invalid JSON ({exc})")
            continue
        if not isinstance(value, dict):
            errors.append(f"line {number}: not a JSON object")
            continue
        tasks.append(value)
    return tasks, errors


def is_heldout_file(tasks: list[dict[str, Any]]) -> bool:
    """Whether the tasks form a held-out-only file: every id starts with ``h``."""
    return bool(tasks) and all(
        isinstance(task.get("id"), str) and task["id"].startswith(HELDOUT_ID_PREFIX)
        for task in tasks
    )


def normalise_objective(objective: str) -> str:
    """An objective with case and whitespace normalised, for duplicate detection."""
    return " ".join(objective.lower().split())


def check_task(task: dict[str, Any], *, heldout_file: bool = False) -> list[str]:
    """Schema and tag rules of one task (``heldout_file``: ids are ``h0001``…)."""
    where = f"task {task.get('id', '?')}"
    errors: list[str] = []
    missing = [name for name in REQUIRED_FIELDS if name not in task]
    extra = sorted(set(task) - set(REQUIRED_FIELDS) - set(OPTIONAL_FIELDS))
    if missing or extra:
        return [f"{where}: missing fields {missing}, unknown fields {extra}"]
    id_re, id_example = (HELDOUT_ID_RE, "h0001") if heldout_file else (ID_RE, "t0001")
    if not isinstance(task["id"], str) or not id_re.match(task["id"]):
        errors.append(f"{where}: id must look like {id_example}")
    objective = task["objective"]
    if not isinstance(objective, str) or not objective.strip():
        errors.append(f"{where}: objective must be a non-empty string")
        objective = ""
    refs = task["context_refs"]
    if not isinstance(refs, list) or not all(isinstance(r, str) and r for r in refs):
        errors.append(f"{where}: context_refs must be a list of non-empty strings")
        refs = []
    label = task["label"]
    if label is not None and label not in FLEET:
        errors.append(f"{where}: label {label!r} is neither a fleet specialist nor null")
    if task["split"] not in ("tune", "heldout"):
        errors.append(f"{where}: split must be 'tune' or 'heldout'")
    tags = task["tags"]
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        return [*errors, f"{where}: tags must be a list of strings"]
    tag_set = set(tags)
    if unknown := tag_set - TAGS:
        errors.append(f"{where}: unknown tags {sorted(unknown)}")
    if len(tag_set) != len(tags):
        errors.append(f"{where}: duplicate tags")
    if ("file-ref" in tag_set) != bool(refs):
        errors.append(f"{where}: tag file-ref must be present exactly when context_refs is set")
    if ("unrelated" in tag_set) != (label is None):
        errors.append(f"{where}: tag unrelated must be present exactly when label is null")
    if "file-in-text" in tag_set and not FILE_TOKEN_RE.search(objective):
        errors.append(f"{where}: tagged file-in-text but no file name found in the objective")
    needs_why = bool(tag_set & {"overlap", "decoy"})
    why = task.get("why")
    if needs_why and not (isinstance(why, str) and why.strip()):
        errors.append(f"{where}: overlap/decoy tasks need a non-empty 'why'")
    if not needs_why and "why" in task:
        errors.append(f"{where}: 'why' is only for overlap/decoy tasks")
    if "no-signal" in tag_set:
        clash = tag_set & {"keyword", "file-ref", "file-in-text", "code", "stack-trace"}
        if clash:
            errors.append(f"{where}: no-signal cannot carry {sorted(clash)}")
        if label is None:
            errors.append(f"{where}: no-signal is for specialist tasks (label not null)")
        if found := NO_SIGNAL_DENY_RE.search(objective):
            errors.append(f"{where}: no-signal objective names {found.group(0)!r}")
        if found := FILE_TOKEN_RE.search(objective):
            errors.append(f"{where}: no-signal objective names a file {found.group(0)!r}")
    return errors


def counts_table(tasks: list[dict[str, Any]]) -> str:
    """A Markdown table of tasks per label and split."""
    keys = [*FLEET, NULL_KEY]
    rows = ["| label | tasks | tune | heldout | heldout % | no-signal | overlap |"]
    rows.append("|---|---:|---:|---:|---:|---:|---:|")
    totals = Counter[str]()
    for key in keys:
        group = [t for t in tasks if label_key(t["label"]) == key]
        held = sum(t["split"] == "heldout" for t in group)
        row = Counter(
            tasks=len(group),
            tune=len(group) - held,
            heldout=held,
            no_signal=sum("no-signal" in t["tags"] for t in group),
            overlap=sum("overlap" in t["tags"] for t in group),
        )
        totals.update(row)
        pct = 100.0 * held / len(group) if group else 0.0
        rows.append(
            f"| {key} | {row['tasks']} | {row['tune']} | {row['heldout']} | {pct:.1f} | "
            f"{row['no_signal']} | {row['overlap']} |"
        )
    pct = 100.0 * totals["heldout"] / totals["tasks"] if totals["tasks"] else 0.0
    rows.append(
        f"| **total** | {totals['tasks']} | {totals['tune']} | {totals['heldout']} | "
        f"{pct:.1f} | {totals['no_signal']} | {totals['overlap']} |"
    )
    return "\n".join(rows)


def _check_duplicates_and_sizes(
    tasks: list[dict[str, Any]], min_tasks: int, min_no_signal: int, min_overlap: int
) -> list[str]:
    """Unique ids and objectives within the file, and its minimum sizes."""
    errors: list[str] = []
    ids = Counter(task["id"] for task in tasks)
    errors.extend(f"duplicate id {i}" for i, n in ids.items() if n > 1)
    objectives = Counter(normalise_objective(task["objective"]) for task in tasks)
    errors.extend(f"duplicate objective: {o[:60]!r}" for o, n in objectives.items() if n > 1)
    if len(tasks) < min_tasks:
        errors.append(f"{len(tasks)} tasks, need at least {min_tasks}")
    tag_counts = Counter(tag for task in tasks for tag in task["tags"])
    if tag_counts["no-signal"] < min_no_signal:
        errors.append(f"{tag_counts['no-signal']} no-signal tasks, need {min_no_signal}")
    if tag_counts["overlap"] < min_overlap:
        errors.append(f"{tag_counts['overlap']} overlap tasks, need {min_overlap}")
    return errors


def check(tasks: list[dict[str, Any]]) -> list[str]:
    """Every rule over the whole file; returns the violations."""
    errors: list[str] = []
    for task in tasks:
        errors.extend(check_task(task))
    if errors:
        return errors  # the set-level checks below assume a valid schema
    errors.extend(_check_duplicates_and_sizes(tasks, MIN_TASKS, MIN_NO_SIGNAL, MIN_OVERLAP))
    for key in [*FLEET, NULL_KEY]:
        group = [t for t in tasks if label_key(t["label"]) == key]
        if not group:
            errors.append(f"no tasks labelled {key}")
            continue
        share = sum(t["split"] == "heldout" for t in group) / len(group)
        if abs(share - HELDOUT_FRACTION) > MAX_LABEL_DEVIATION:
            errors.append(f"{key}: {share:.1%} held out, outside 30 % +- 5 points")
    held = sum(task["split"] == "heldout" for task in tasks)
    if abs(held - HELDOUT_FRACTION * len(tasks)) > 1:
        errors.append(f"{held} of {len(tasks)} held out, not 30 % +- 1 task")
    expected = expected_split(tasks)
    moved = sorted(t["id"] for t in tasks if t["split"] != expected[t["id"]])
    if moved:
        errors.append(
            f"split differs from the seeded split for {len(moved)} tasks "
            f"(first: {moved[:5]}); run with --assign-split after adding tasks"
        )
    return errors


def check_heldout(
    tasks: list[dict[str, Any]], reference: list[dict[str, Any]], reference_name: str
) -> list[str]:
    """Every rule over a held-out-only file; ``reference`` is the main set it must not share.

    The per-task rules are those of ``check``; instead of the seeded split, every task must be
    ``heldout``, and no id or (normalised) objective may also occur in ``reference``.
    """
    errors: list[str] = []
    for task in tasks:
        errors.extend(check_task(task, heldout_file=True))
    if errors:
        return errors  # the set-level checks below assume a valid schema
    errors.extend(
        _check_duplicates_and_sizes(
            tasks, HELDOUT_MIN_TASKS, HELDOUT_MIN_NO_SIGNAL, HELDOUT_MIN_OVERLAP
        )
    )
    for key in [*FLEET, NULL_KEY]:
        if not any(label_key(t["label"]) == key for t in tasks):
            errors.append(f"no tasks labelled {key}")
    errors.extend(
        f"task {t['id']}: split must be 'heldout' in a held-out file"
        for t in tasks
        if t["split"] != "heldout"
    )
    reference_ids = {t.get("id") for t in reference}
    reference_objectives = {
        normalise_objective(t["objective"])
        for t in reference
        if isinstance(t.get("objective"), str)
    }
    for task in tasks:
        if task["id"] in reference_ids:
            errors.append(f"task {task['id']}: id also used in {reference_name}")
        if normalise_objective(task["objective"]) in reference_objectives:
            errors.append(f"task {task['id']}: objective duplicates one in {reference_name}")
    return errors


def assign_split(path: Path, tasks: list[dict[str, Any]]) -> None:
    """Rewrite PATH with every task's split set from ``expected_split``."""
    expected = expected_split(tasks)
    lines = []
    for task in tasks:
        task["split"] = expected[task["id"]]
        lines.append(json.dumps(task, ensure_ascii=False))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _other_sets(path: Path) -> list[Path]:
    """The sets a held-out file must not overlap: the main set and every other held-out file."""
    others = sorted(DEFAULT_PATH.parent.glob("heldout_*.jsonl"))
    return [DEFAULT_PATH, *(p for p in others if p.resolve() != path.resolve())]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", type=Path, help="same as --data")
    parser.add_argument(
        "--data", type=Path, help=f"the JSONL file to check (default {DEFAULT_PATH.name})"
    )
    parser.add_argument(
        "--against",
        type=Path,
        action="append",
        help="for a held-out file: a set it must share no id or objective with (repeatable; "
        f"default {DEFAULT_PATH.name} and every other heldout_*.jsonl beside it)",
    )
    parser.add_argument(
        "--assign-split", action="store_true", help="rewrite every split from the seeded rule"
    )
    args = parser.parse_args()
    if args.path is not None and args.data is not None and args.path != args.data:
        parser.error("give the file either as PATH or as --data, not both")
    path: Path = args.data or args.path or DEFAULT_PATH
    tasks, errors = load(path)
    heldout_file = not errors and is_heldout_file(tasks)
    if heldout_file and args.assign_split:
        errors = ["--assign-split is only for a tune/heldout set; a held-out file is all heldout"]
    if not errors and args.assign_split:
        assign_split(path, tasks)
    if not errors and heldout_file:
        for other in args.against or _other_sets(path):
            reference, reference_errors = load(other)
            errors.extend(
                [f"{other}: {e}" for e in reference_errors]
                or check_heldout(tasks, reference, other.name)
            )
        errors = list(dict.fromkeys(errors))  # per-task errors repeat once per reference
    elif not errors:
        errors = check(tasks)
    if not errors:
        print(counts_table(tasks))
    for error in errors:
        print(f"ERROR: {error}", file=sys.stderr)
    print(f"{path}: {len(tasks)} tasks, {'OK' if not errors else f'{len(errors)} errors'}")
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
