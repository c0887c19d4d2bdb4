"""gemm_sass_report.py: each global atomic of the compiled kernel, its fence and how soon its
result is read; the spills."""

from __future__ import annotations

import re

import pytest

from tests.support.scripts import load_script

sass_report = load_script("benchmarks/kernels/gemm_sass_report.py")

#: nvdisasm-like lines: a counted atomic read at once (a warp's shuffle), a fenced one read
#: much later, a reduction, a spill pair, an atomic whose result is overwritten unread.
SASS = """
        /*0010*/                   STL [R1+0x4], R9 ;
        /*0020*/               @P1 ATOMG.E.ADD.STRONG.GPU PT, R5, desc[UR8][R2.64], R5 ;
        /*0030*/                   S2R R6, SR_LTMASK ;
        /*0040*/                   SHFL.IDX PT, R0, R5, R4, 0x1f ;
        /*0050*/                   MEMBAR.ALL.GPU ;
        /*0060*/                   ERRBAR;
        /*0070*/                   ATOMG.E.ADD.STRONG.GPU PT, R8, desc[UR8][R6.64+0x4], R7 ;
        /*0080*/                   LDG.E R10, desc[UR8][R12.64] ;
        /*0090*/                   IMAD R11, R10, 0x2, RZ ;
        /*00a0*/                   STG.E desc[UR8][R14.64], R11 ;
        /*00b0*/                   IADD3 R13, R13, 0x1, RZ ;
        /*00c0*/                   IMAD R15, R15, 0x2, RZ ;
        /*00d0*/                   LOP3.LUT R16, R16, 0x3, RZ, 0xc0, !PT ;
        /*00e0*/                   IADD3 R17, R17, 0x1, RZ ;
        /*00f0*/                   LDL R9, [R1+0x4] ;
        /*0100*/                   ISETP.NE.U32.AND P0, PT, R8, UR4, PT ;
        /*0110*/               @P0 REDG.E.ADD.STRONG.GPU desc[UR8][R2.64], R5 ;
        /*0120*/                   ATOMG.E.EXCH.STRONG.GPU PT, R20, desc[UR8][R2.64], RZ ;
        /*0130*/                   MOV R20, 0x1 ;
        /*0140*/                   EXIT ;
"""


def test_each_atomic_is_listed_with_its_fence_and_how_soon_its_result_is_read() -> None:
    program = sass_report.instructions(SASS)
    found = [(a.opcode, a.fenced, a.result, a.wait()) for a in sass_report.atomics(program)]
    assert found == [
        ("ATOMG.E.ADD.STRONG.GPU", False, 5, "at once"),
        ("ATOMG.E.ADD.STRONG.GPU", True, 8, "9 later"),
        ("REDG.E.ADD.STRONG.GPU", False, None, "no result"),
        ("ATOMG.E.EXCH.STRONG.GPU", False, 20, "result not read"),
    ]
    assert sass_report.spills(program) == (1, 1)


def test_a_register_pair_reads_both_registers_and_a_store_reads_all_its_operands() -> None:
    pair = sass_report.instructions("/*0*/ LDG.E R10, desc[UR8][R12.64] ;")[0]
    assert pair.reads() == {12, 13}
    assert pair.writes() == 10
    store = sass_report.instructions("/*0*/ STG.E desc[UR8][R14.64], R11 ;")[0]
    assert store.reads() == {14, 15, 11}
    assert store.writes() is None


def test_runs_of_spills_are_placed_by_the_memory_instruction_after_them() -> None:
    saves = "".join(f"/*{i:04x}*/ STL [R1+0x{4 * i:x}], R{100 + i} ;\n" for i in range(5))
    sass = saves + (
        "/*0100*/ IADD3 R7, R7, 0x1, RZ ;\n"
        "/*0110*/ LDG.E.STRONG.GPU R10, desc[UR8][R168.64] ;\n"
        "/*0120*/ LDL R100, [R1] ;\n"  # (a lone reload: no run)
        "/*0130*/ HMMA.16816.F32.BF16 R20, R4, R8, R20 ;\n"
    )
    runs = sass_report.spill_runs(sass_report.instructions(sass))
    assert runs == [sass_report.SpillRun(0, "STL", 5, "LDG.E.STRONG.GPU")]
    assert sass_report.report(sass_report.instructions(sass))[-1] == (
        "| 0 | STL | 5 | LDG.E.STRONG.GPU |"
    )


def test_the_one_launch_forms_counters_are_read_from_its_compiled_kernel(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Compiled for sm_90 on the CPU: the one-launch split form at 8 rows counts each finished
    shrink sum with a fenced reduction (release, no result), zeroes its counters by exchanges
    whose result it does not need, and waits for its job tickets at once (it needs the job)."""
    pytest.importorskip("triton.backends.nvidia")
    assert sass_report.main(["--rows", "8", "--forms", "inside"]) == 0
    out = capsys.readouterr().out
    assert "## 4096x4096, 8 rows, form inside" in out
    stores, loads = (int(n) for n in re.findall(r"spills: (\d+) stores, (\d+) loads", out)[0])
    assert stores >= 0
    assert loads >= 0
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in out.splitlines()
        if "ATOMG" in line or "REDG" in line
    ]
    assert any(
        r[1].startswith("REDG.E.ADD") and r[2] == "yes" and r[4] == "no result" for r in rows
    )
    exchanges = [r for r in rows if r[1].startswith("ATOMG.E.EXCH")]
    assert exchanges
    assert all(r[4] == "no result" for r in exchanges)
    assert any(r[1].startswith("ATOMG.E.ADD") and r[2] == "no" and r[4] == "at once" for r in rows)


def test_a_shape_the_table_does_not_plan_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        sass_report.main(["--shape", "1x1"])
    assert "not planned for NVIDIA H200: 1x1" in capsys.readouterr().err
