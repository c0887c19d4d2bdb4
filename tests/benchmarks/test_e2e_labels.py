"""e2e_labels.sh: gpu_e2e.sh's server labels read apart (kind, table, max rank, source tree)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

LABELS = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels" / "e2e_labels.sh"


def read(label: str, r: str = "16", suffix: str = "") -> dict[str, str]:
    """What each function of e2e_labels.sh says of ``label`` (bash, as gpu_e2e.sh sources it)."""
    script = (
        f'source "{LABELS}"; for f in kind_of table_of rank_of tree_of tag; do '
        'echo "$f=$($f "$1")"; done'
    )
    done = subprocess.run(
        ["bash", "-uc", script, "labels", label],
        env={"R": r, "SUFFIX": suffix, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


@pytest.mark.parametrize(
    ("label", "kind", "table", "rank", "tree", "tag"),
    [
        ("native", "native", "", "16", "", "native-r16"),
        ("ours-auto-spec-r64", "ours-auto-spec", "", "64", "", "ours-auto-spec-r64"),
        (
            "ours-auto-spec+few-rows-8-one",
            "ours-auto-spec+few-rows-8-one",
            "few-rows-8-one",
            "16",
            "",
            "ours-auto-spec+few-rows-8-one-r16",
        ),
        (
            "ours-auto-spec@before",
            "ours-auto-spec",
            "",
            "16",
            "before",
            "ours-auto-spec@before-r16",
        ),
        (
            "ours-auto-spec+slot-rank-64-r64@old",
            "ours-auto-spec+slot-rank-64",
            "slot-rank-64",
            "64",
            "old",
            "ours-auto-spec+slot-rank-64@old-r64",
        ),
    ],
)
def test_a_label_reads_as_its_name_table_rank_and_tree(
    label: str, kind: str, table: str, rank: str, tree: str, tag: str
) -> None:
    said = read(label)
    assert said == {
        "kind_of": kind,
        "table_of": table,
        "rank_of": rank,
        "tree_of": tree,
        "tag": tag,
    }


def test_the_tag_carries_the_runs_suffix_and_the_default_rank() -> None:
    assert read("ours", r="64", suffix="-n64")["tag"] == "ours-r64-n64"
