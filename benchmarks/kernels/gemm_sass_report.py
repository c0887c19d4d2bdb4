"""Where the fused GEMM's compiled kernel waits on memory: its global atomics and spills, read
from the SASS that Triton's bundled ptxas makes for sm_90 (no GPU needed).

An atomic whose result the program reads at once costs a whole L2 round trip there; one whose
result is read much later (or never) overlaps the work in between. Triton shares a scalar
atomic's result with the whole block through shared memory right where it is issued, and at a
uniform address the compiler counts a warp's lanes in one atomic and shuffles the result to
them, so both wait at once; a fence (``MEMBAR``) before an atomic with release semantics also
waits for the program's outstanding stores and loads. For each global atomic, in the order of
the program text, the report gives the instruction, whether a fence comes just before it, the
register it returns and how many instructions later that register is first read. It also counts
the spill stores and loads (``STL``/``LDL``) and lists their runs (a register save or restore),
each with the global memory instruction after it, which places it. The shipped kernels, compiled
as a served call's variant is, spill nothing at 8 or 64 rows on o's tile (twenty-ninth window;
the spills the twenty-eighth window read, 59 and 156 stores, came from a compile that lacked the
served variant's specialisation, benchmarks/README.md).

    python benchmarks/kernels/gemm_sass_report.py [--rows 8 64] [--shape 4096x4096]
        [--forms inside] [--may-fuse no] [--slot-rank 16] [--device "NVIDIA H200"]

The kernel is the one a call of that shape and that many rows launches, on the shipped table's
tile for it, its arguments specialised as the served call's
(:func:`hi_moe_lora.kernels.gemm_compile.compile_gemm_for_target`). "First read"
counts instructions in text order, a fair guide inside straight code; across a branch it is
only an estimate.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.kernels.spill_report import run_on_cubin
from hi_moe_lora.kernels.gemm_compile import compile_gemm_for_target
from hi_moe_lora.kernels.gemm_tiles import TABLE_FILE, load_table

#: A SASS instruction line of ``nvdisasm``: address, optional predicate, opcode, operands.
_INSTRUCTION = re.compile(r"/\*[0-9a-f]+\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
_REGISTER = re.compile(r"\bR(\d+)(\.64)?\b")
#: Opcodes whose operands are all read (no destination register first).
_NO_DESTINATION = ("ST", "RED", "BRA", "EXIT", "BAR", "MEMBAR", "CCTL", "ERRBAR", "BSYNC")
#: The most instructions between an atomic and a read of its result taken as "at once" (a
#: warp-aggregated atomic shuffles its result within about five).
AT_ONCE = 8


@dataclass(frozen=True)
class Instruction:
    opcode: str
    operands: tuple[str, ...]

    def _destination(self) -> int | None:
        """Which operand it writes: an atomic's second (after ``PT``), none for stores,
        reductions and control, else the first."""
        if self.opcode.startswith("ATOM"):
            return 1
        return None if self.opcode.startswith(_NO_DESTINATION) else 0

    def reads(self) -> set[int]:
        """The general registers it reads (a ``.64`` pair: both)."""
        at = self._destination()
        sources = self.operands if at is None else self.operands[at + 1 :]
        found: set[int] = set()
        for operand in sources:
            for number, pair in _REGISTER.findall(operand):
                found.add(int(number))
                if pair:
                    found.add(int(number) + 1)
        return found

    def writes(self) -> int | None:
        """The general register it writes first, if any."""
        at = self._destination()
        if at is None or len(self.operands) <= at:
            return None
        found = re.fullmatch(r"R(\d+)", self.operands[at].strip())
        return int(found.group(1)) if found else None


@dataclass(frozen=True)
class Atomic:
    """One global atomic of the kernel and how soon the program waits for it."""

    index: int
    opcode: str
    fenced: bool
    result: int | None
    first_read: int | None

    def wait(self) -> str:
        if self.result is None:
            return "no result"
        if self.first_read is None:
            return "result not read"
        return "at once" if self.first_read <= AT_ONCE else f"{self.first_read} later"


def instructions(sass: str) -> list[Instruction]:
    """The instructions of ``nvdisasm`` output, in text order."""
    found = []
    for line in sass.splitlines():
        match = _INSTRUCTION.search(line)
        if match:
            operands = tuple(o.strip() for o in match.group(2).split(",") if o.strip())
            found.append(Instruction(match.group(1), operands))
    return found


def atomics(program: list[Instruction]) -> list[Atomic]:
    """Each global atomic (``ATOMG``/``REDG``) with its fence and its result's first read."""
    found = []
    for index, instruction in enumerate(program):
        if not instruction.opcode.startswith(("ATOMG", "REDG")):
            continue
        fenced = any(p.opcode.startswith("MEMBAR") for p in program[max(0, index - 4) : index])
        result = instruction.writes() if instruction.opcode.startswith("ATOMG") else None
        first_read = None
        if result is not None:
            for distance, later in enumerate(program[index + 1 :], start=1):
                if result in later.reads():
                    first_read = distance
                    break
                if later.writes() == result:
                    break
        found.append(Atomic(index, instruction.opcode, fenced, result, first_read))
    return found


@dataclass(frozen=True)
class SpillRun:
    """Spill stores or loads close together (a register save or restore), and the first memory
    instruction after them that is not a spill: where in the program they sit."""

    index: int
    kind: str
    count: int
    before: str | None


#: Instructions a run of spills may skip between two of its own.
RUN_GAP = 4
#: Opcodes that mark a place in the program: global loads and atomics, tensor-core dots.
_LANDMARKS = ("LDG", "ATOMG", "REDG", "STG", "HMMA", "HGMMA", "LDGSTS")


def spill_runs(program: list[Instruction], least: int = 4) -> list[SpillRun]:
    """Runs of at least ``least`` spill stores (``STL``) or loads (``LDL``), each at most
    :data:`RUN_GAP` instructions after the one before, with the landmark that follows each."""
    runs: list[SpillRun] = []
    for kind in ("STL", "LDL"):
        at = [i for i, ins in enumerate(program) if ins.opcode.startswith(kind)]
        groups: list[list[int]] = []
        for index in at:
            if groups and index - groups[-1][-1] <= RUN_GAP:
                groups[-1].append(index)
            else:
                groups.append([index])
        for group in groups:
            if len(group) >= least:
                after = program[group[-1] + 1 :]
                landmark = next((i.opcode for i in after if i.opcode.startswith(_LANDMARKS)), None)
                runs.append(SpillRun(group[0], kind, len(group), landmark))
    return sorted(runs, key=lambda run: run.index)


def spills(program: list[Instruction]) -> tuple[int, int]:
    """(spill stores, spill loads): ``STL`` and ``LDL`` instructions."""
    stores = sum(1 for i in program if i.opcode.startswith("STL"))
    loads = sum(1 for i in program if i.opcode.startswith("LDL"))
    return stores, loads


def disassemble(cubin: bytes) -> str:
    """``nvdisasm`` of Triton's NVIDIA backend on ``cubin``."""
    return run_on_cubin("nvdisasm", "-c", cubin)


def report(program: list[Instruction]) -> list[str]:
    """The report's lines for one compiled kernel."""
    stores, loads = spills(program)
    lines = [
        f"{len(program)} instructions; spills: {stores} stores, {loads} loads",
        "",
        "| # | instruction | fence before | result | first read |",
        "|---|---|---|---|---|",
    ]
    for atomic in atomics(program):
        result = f"R{atomic.result}" if atomic.result is not None else "-"
        fence = "yes" if atomic.fenced else "no"
        lines.append(f"| {atomic.index} | {atomic.opcode} | {fence} | {result} | {atomic.wait()} |")
    runs = spill_runs(program)
    if runs:
        lines += ["", "| # | spills | count | next memory instruction |", "|---|---|---|---|"]
        for run in runs:
            lines.append(f"| {run.index} | {run.kind} | {run.count} | {run.before or '-'} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="NVIDIA H200", help="whose plans (the table's key)")
    parser.add_argument("--shape", default="4096x4096", help="a planned shape key (N x K)")
    parser.add_argument("--rows", type=int, nargs="+", default=[8, 64])
    parser.add_argument(
        "--forms", nargs="+", default=["inside"], choices=["none", "ahead", "inside", "beside"]
    )
    parser.add_argument("--may-fuse", choices=["yes", "no"], default="no")
    parser.add_argument("--slot-rank", type=int, default=16)
    args = parser.parse_args(argv)
    plans = load_table(TABLE_FILE).get(args.device, {})
    if args.shape not in plans:
        parser.error(f"not planned for {args.device}: {args.shape}")
    tile = plans[args.shape].lora_tile
    for rows in args.rows:
        for form in args.forms:
            kernel = compile_gemm_for_target(
                tile, form, slot_rank=args.slot_rank, may_fuse=args.may_fuse == "yes",
                rows=rows,
            )  # fmt: skip
            print(
                f"## {args.shape}, {rows} rows, form {form}, may fuse {args.may_fuse}, slot rank "
                f"{args.slot_rank}: tile n{tile.block_n} k{tile.block_k} s{tile.stages} "
                f"w{tile.warps} x{tile.split_k}"
            )
            print("\n".join(report(instructions(disassemble(kernel.asm["cubin"])))))
            print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
