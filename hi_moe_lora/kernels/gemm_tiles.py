"""Which tile the fused GEMM (:mod:`.gemm_lora`) takes for a weight shape, on which GPU.

A 64-row GEMM is bound by streaming W: its speed is how many bytes the tile keeps in flight,
which depends on the GPU, the shape and the tile (columns per program, K step, pipeline depth,
warps, K splits). So the tiles are measured, per GPU and shape, by
``benchmarks/kernels/tune_gemm_tiles.py`` into a table (``gemm_tiles.json`` beside this module,
or the file ``HI_MOE_LORA_GEMM_TILES`` names). Each entry of the table also says

- ``fuse``: whether a one-adapter step's LoRA rides inside the GEMM (it beat cuBLAS then our
  launch),
- ``several``: the route of a step of several adapters (:class:`SeveralRoute`: ``"ours"``, our
  launch after the GEMM; ``"fused"``, the LoRA tile's GEMM, then our launch on the rest;
  ``"split"``, a shrink launch, then the expand in the GEMM's epilogue: :mod:`.gemm_shrink`;
  ``"one-launch"``, the same with the shrink inside the GEMM's launch; ``"shrink-beside"``,
  its helpers in a launch on a side stream), the fastest measured.
  Tables from before it say ``split`` (true: ``"split"``) or nothing (``"ours"``), and
- ``plain``: the tile that runs the GEMM where no LoRA rides inside it, if one beat cuBLAS
  (else ``null``: cuBLAS), and, optionally,
- ``few_rows``: ``{"from_rows": R, "several": ROUTE}``, how a step of several adapters runs
  below the fused GEMM's least rows (:data:`.gemm_lora.FUSED_GEMM_ROWS`): from ``R`` rows, by
  ``ROUTE``, a split form (:class:`FewRows`; under ``--specialize-active-lora`` only, the count
  of adapters known), and with ``"one_adapter": true`` every other step with LoRA too (one
  adapter, or a count not known), over the whole work list; ``"tile"`` gives these calls a GEMM
  tile of their own (else the plan's LoRA tile, measured at 64 rows;
  ``benchmarks/kernels/tune_few_rows.py`` measures it). Absent: such calls run cuBLAS then our
  launch.

Every route and tile of the shipped table was measured with slots of rank 16 (vLLM's
``--max-lora-rank 16``). The split forms read each adapter at its own rank (the work list's
tile records carry it), but a wide adapter (rank 64 in rank-64 slots) still costs them four
times a rank-16 one, and what a wider slot costs them was not measured into the table. So above
the table's ``measured_slot_rank`` (:data:`MEASURED_SLOT_RANK` where it says none), steps of
several adapters take our launch (:func:`at_slot_rank`).

On a GPU the table holds, a shape it does not hold (another model, another tensor-parallel
split) is not fused: cuBLAS then our launch, as without the fused GEMM, until the sweep measures
it (``--shape``). On a GPU the table does not hold (``HI_MOE_LORA_FUSED_GEMM=on`` there), every
shape takes the rule of thumb (:func:`default_plan`): the tile the first sweep found (H200,
2026-11-28), the LoRA inside where the input is not wider than the output, the split form for
elongated weights, and cuBLAS for the plain GEMM.
"""

from __future__ import annotations

import enum
import functools
import json
import logging
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

ENV_GEMM_TILES = "HI_MOE_LORA_GEMM_TILES"
#: The most rows a plan serves (one row tile of the fused GEMM).
MAX_PLAN_ROWS = 64
#: The slot rank (``--max-lora-rank``) a table's routes hold up to where it does not say
#: (``measured_slot_rank``). Above it, steps of several adapters take our launch. With 16
#: rank-16 adapters in rank-64 slots (H200, 2026-11-29, benchmarks/README.md) the split form in
#: one launch added 9.1, 18.5 and 9.2 µs a call to cuBLAS on o, gate_up and down (twenty-second
#: window, each adapter at its own rank; 20.2 and 54.0 on o and gate_up at the slots' rank,
#: twenty-first window), our launch 9.1, 21.4 and 14.7; neither form served at max rank 64 yet.
MEASURED_SLOT_RANK = 16
#: The table shipped with the package.
TABLE_FILE = Path(__file__).with_name("gemm_tiles.json")

logger = logging.getLogger(__name__)


class GemmTilesError(ValueError):
    """A tile table that cannot be read or does not hold valid tiles."""


@dataclass(frozen=True)
class GemmTile:
    """Columns per program, K step, pipeline depth, warps and K splits of one launch.

    With ``split_k`` above one, ``split_k`` programs share a column block, each over its own
    run of K; each stores its fp32 partial (its share of the LoRA included, by linearity) and
    the last to arrive sums them in order (deterministic) and stores ``y``: more programs in
    flight for the same weight bytes.
    """

    block_n: int
    block_k: int
    stages: int
    warps: int = 4
    split_k: int = 1

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not (isinstance(value, int) and value >= 1):
                raise GemmTilesError(f"{name} must be a positive integer, not {value!r}")
        for name in ("block_n", "block_k", "warps", "split_k"):
            value = getattr(self, name)
            if value & (value - 1):
                raise GemmTilesError(f"{name} must be a power of two, not {value}")
        if self.block_n < 16 or self.block_k < 16:
            raise GemmTilesError(f"blocks of at least 16 (tl.dot's least), not {self}")


class SeveralRoute(enum.Enum):
    """How a shape's calls run in a step of several adapters.

    Measured per shape at 16 adapters and 64 rows (H200, 2026-11-28 and -29, four windows):
    the split form in one launch won on o and gate_up (by 1.2-2.0 and 2.5-4.1 µs); our launch
    after cuBLAS on qkv, where the shrink costs about what our whole launch does, in either
    form. Down lost by about 14 µs in one launch on its first tile (64 x 128, four stages: one
    program an SM, so the shrink's jobs found few free SMs) and took the LoRA tile's GEMM, then
    our launch; on a tile of 64 x 64, six stages, it wins in one launch by 2.4-3.3 µs (served:
    about 100 µs less GPU time in a 16-adapter step, two rounds).
    """

    #: cuBLAS or the plain tile, then our launch over every LoRA token. Without
    #: ``--specialize-active-lora`` the count of adapters is not known when the op runs, so a
    #: one-adapter step must still find its fused slot: there this runs as :attr:`FUSED`.
    OURS = "ours"
    #: The LoRA tile's GEMM (a one-adapter step's LoRA inside it, by the fused slot on the
    #: device: none in a step of several), then our launch on the rest of the step's tokens.
    FUSED = "fused"
    #: A shrink launch over the rest of the step's tokens, then the LoRA tile's GEMM with their
    #: expand in its epilogue; no launch after it.
    SPLIT = "split"
    #: The split form in one launch: the shrink's programs take the launch's first tickets and
    #: the GEMM's wait for them only in the epilogue, so the shrink runs under the GEMM's K loop
    #: instead of ahead of it.
    ONE_LAUNCH = "one-launch"
    #: The same, its helper programs in a launch of their own on a side stream beside the
    #: GEMM's (smaller programs, so they share SMs with the GEMM's where one launch's, sized
    #: for the GEMM, could not). Measured at 16 adapters (H200, 2026-11-29), it beat each
    #: shipped route only on a shape's old tile or by less than the noise (qkv 12.7 against
    #: 13.4 µs), so no table takes it.
    SHRINK_BESIDE = "shrink-beside"


#: The routes that expand in the GEMM's epilogue (a split form).
SPLIT_ROUTES = (SeveralRoute.SPLIT, SeveralRoute.ONE_LAUNCH, SeveralRoute.SHRINK_BESIDE)


@dataclass(frozen=True)
class FewRows:
    """How a step of several adapters runs below the fused GEMM's least rows.

    At 8 and 32 rows with 8 adapters the split form in one launch beat cuBLAS then our launch
    by 4-8 µs a call on o, gate_up and down, and by 2.1-2.4 on qkv, whose route above (``ours``)
    differs (H200, 2026-11-29, benchmarks/README.md, nineteenth window). A one-adapter step's
    LoRA inside the GEMM's K loop (the fused slot) lost there by up to 42 µs, so those keep our
    launch, unless ``one_adapter`` sends them through the split form too (its shrink over the
    whole work list; the GEMM compiled without the fused slot's K loop).
    """

    #: The least rows that take it (fewer: cuBLAS, then our launch).
    from_rows: int
    #: Its route, a split form.
    several: SeveralRoute = SeveralRoute.ONE_LAUNCH
    #: Whether steps of one adapter, and steps whose count vLLM does not tell (no
    #: ``--specialize-active-lora``), take it too; every step with LoRA then takes it over the
    #: whole work list, never by the fused slot (so also one adapter beside base rows, which
    #: vLLM counts as two). Else those keep cuBLAS then our launch.
    one_adapter: bool = False
    #: The GEMM's tile for these calls; None: the plan's LoRA tile (measured at 64 rows).
    tile: GemmTile | None = None

    def __post_init__(self) -> None:
        rows = self.from_rows
        if type(rows) is not int or not 1 <= rows <= MAX_PLAN_ROWS:
            raise GemmTilesError(f"from_rows is from 1 to {MAX_PLAN_ROWS}, not {rows!r}")
        if self.tile is not None and not isinstance(self.tile, GemmTile):
            raise GemmTilesError(f"tile is a GemmTile or None, not {self.tile!r}")
        if type(self.one_adapter) is not bool:
            raise GemmTilesError(f"one_adapter is true or false, not {self.one_adapter!r}")
        if self.several not in SPLIT_ROUTES:
            names = ", ".join(repr(route.value) for route in SPLIT_ROUTES)
            raise GemmTilesError(f"several is a split form ({names}), not {self.several.value!r}")


@dataclass(frozen=True)
class GemmPlan:
    """How the calls of one weight shape run."""

    #: The tile of the GEMM that carries a one-adapter step's LoRA.
    lora_tile: GemmTile
    #: Whether one-adapter steps take it (else: the plain GEMM, then our launch).
    fuse: bool
    #: The tile of the GEMM without LoRA inside; None: cuBLAS (``torch.mm``).
    plain_tile: GemmTile | None
    #: The route of a step of several adapters.
    several: SeveralRoute = SeveralRoute.OURS
    #: How a step of several adapters runs below the fused GEMM's least rows; None: cuBLAS,
    #: then our launch.
    few_rows: FewRows | None = None


def at_slot_rank(plan: GemmPlan, slot_rank: int, measured: int = MEASURED_SLOT_RANK) -> GemmPlan:
    """``plan`` for slots of ``slot_rank`` (the stacked A's and B's rank): as measured up to
    ``measured`` (the table's :func:`measured_slot_rank`); above it, steps of several adapters
    take our launch (``OURS``, no ``few_rows``), while a one-adapter step's LoRA stays inside
    the GEMM (served at max rank 64: 0.881 of the base, 0.899 at 16)."""
    if slot_rank <= measured:
        return plan
    return _several_by_our_launch(plan)


def few_rows_route(plan: GemmPlan) -> GemmPlan | None:
    """``plan`` as a call below the fused GEMM's least rows runs under its ``few_rows``: that
    route, on its few-rows tile where it names one (else the LoRA tile); None without
    ``few_rows``."""
    few = plan.few_rows
    if few is None:
        return None
    tile = plan.lora_tile if few.tile is None else few.tile
    return replace(plan, several=few.several, lora_tile=tile)


@functools.cache
def _several_by_our_launch(plan: GemmPlan) -> GemmPlan:
    """``plan`` with our launch for several adapters, made once per plan (the op asks on every
    eager call: a cached plan costs a hash, a new one a dataclass copy)."""
    return replace(plan, several=SeveralRoute.OURS, few_rows=None)


def default_tile(n: int, k: int) -> GemmTile:
    """The tile for an ``(n, k)`` weight at decode sizes (64 rows) without a measured one.

    From the prototype's sweep on an H200 (``benchmarks/kernels/bench_fused_gemm.py``,
    2026-11-28): 32 columns for square weights (o), 64 columns with a K step of 64 six deep for
    the widest (gate_up), 64 with a K step of 128 otherwise (qkv).
    """
    if n >= 4 * k:
        return GemmTile(64, 64, 6)
    if n <= k:
        return GemmTile(32, 128, 4)
    return GemmTile(64, 128, 4)


def default_plan(n: int, k: int) -> GemmPlan:
    """The rule of thumb: LoRA inside where the input is not wider than the output (for down
    the unsplit GEMM was 2.6-13 µs slower than cuBLAS then our launch, H200, 2026-11-28), and
    the split form where one side of the weight is at least three times the other (at 16
    adapters it beat our launch after the GEMM on gate_up and down, by 7.5 and 0.8 µs, and lost
    on qkv and o, by 0.7 and 2.5: our launch's cost grows with the weight's long side, the split
    form's is mostly its shrink launch; H200, 2026-11-28)."""
    elongated = max(n, k) >= 3 * min(n, k)
    several = SeveralRoute.SPLIT if elongated else SeveralRoute.OURS
    return GemmPlan(default_tile(n, k), fuse=k <= n, plain_tile=None, several=several)


def shape_key(n: int, k: int) -> str:
    """The table's key for an ``(n, k)`` weight."""
    return f"{n}x{k}"


def _tile(raw: Any, where: str) -> GemmTile:
    if not isinstance(raw, dict):
        raise GemmTilesError(f"{where}: a tile is an object, not {raw!r}")
    try:
        return GemmTile(**raw)
    except TypeError as error:
        raise GemmTilesError(f"{where}: {error}") from None
    except GemmTilesError as error:
        raise GemmTilesError(f"{where}: {error}") from None


def _several(entry: dict[str, Any], where: str) -> SeveralRoute:
    """An entry's route for several adapters: ``several``, or a table's older ``split`` flag."""
    if "several" in entry and "split" in entry:
        raise GemmTilesError(f"{where}: give several or split (older tables), not both")
    if "several" in entry:
        try:
            return SeveralRoute(entry["several"])
        except ValueError:
            choices = ", ".join(repr(route.value) for route in SeveralRoute)
            raise GemmTilesError(
                f"{where}: several is one of {choices}, not {entry['several']!r}"
            ) from None
    split = entry.get("split", False)
    if not isinstance(split, bool):
        raise GemmTilesError(f"{where}: split is true or false, not {split!r}")
    return SeveralRoute.SPLIT if split else SeveralRoute.OURS


def _few_rows(entry: dict[str, Any], where: str) -> FewRows | None:
    """An entry's ``few_rows``, if it has one."""
    raw = entry.get("few_rows")
    if raw is None:
        return None
    where = f"{where}: few_rows"
    keys = {"from_rows", "several", "one_adapter", "tile"}
    if not isinstance(raw, dict) or set(raw) - keys or "several" not in raw:
        raise GemmTilesError(
            f'{where}: expected {{"from_rows": rows, "several": route, "one_adapter": bool, '
            '"tile": tile}} (one_adapter and tile optional)'
        )
    several = _several(raw, where)
    tile = None if raw.get("tile") is None else _tile(raw["tile"], f"{where}: tile")
    try:
        return FewRows(
            raw.get("from_rows"),  # type: ignore[arg-type]
            several,
            raw.get("one_adapter", False),
            tile,
        )
    except GemmTilesError as error:
        raise GemmTilesError(f"{where}: {error}") from None


def parse_table(raw: Any, source: str) -> dict[str, dict[str, GemmPlan]]:
    """``{device name: {shape key: plan}}`` from a table's JSON (``{"devices": ...}``)."""
    devices = raw.get("devices") if isinstance(raw, dict) else None
    if not isinstance(devices, dict):
        raise GemmTilesError(f'{source}: expected {{"devices": {{name: {{shape: entry}}}}}}')
    table: dict[str, dict[str, GemmPlan]] = {}
    for device, shapes in devices.items():
        if not isinstance(shapes, dict):
            raise GemmTilesError(f"{source}: {device}: expected {{shape: entry}}")
        plans = {}
        for key, entry in shapes.items():
            where = f"{source}: {device}: {key}"
            if not isinstance(entry, dict) or not isinstance(entry.get("fuse"), bool):
                raise GemmTilesError(f'{where}: expected {{"lora", "fuse", "plain"}}')
            plain = entry.get("plain")
            plans[key] = GemmPlan(
                _tile(entry.get("lora"), f"{where}: lora"),
                entry["fuse"],
                None if plain is None else _tile(plain, f"{where}: plain"),
                _several(entry, where),
                _few_rows(entry, where),
            )
        table[device] = plans
    return table


def table_json(
    table: dict[str, dict[str, GemmPlan]], note: str, slot_rank: int = MEASURED_SLOT_RANK
) -> dict[str, Any]:
    """The JSON form :func:`parse_table` reads (what the tuning scripts write), with
    ``measured_slot_rank`` where ``slot_rank`` is wider than :data:`MEASURED_SLOT_RANK`."""
    raw: dict[str, Any] = {"note": note}
    if slot_rank != MEASURED_SLOT_RANK:
        raw["measured_slot_rank"] = slot_rank
    raw["devices"] = {
        device: {key: _entry_json(plan) for key, plan in plans.items()}
        for device, plans in table.items()
    }
    return raw


def _entry_json(plan: GemmPlan) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "lora": asdict(plan.lora_tile),
        "fuse": plan.fuse,
        "several": plan.several.value,
        "plain": None if plan.plain_tile is None else asdict(plan.plain_tile),
    }
    if plan.few_rows is not None:
        entry["few_rows"] = {
            "from_rows": plan.few_rows.from_rows,
            "several": plan.few_rows.several.value,
        }
        if plan.few_rows.one_adapter:
            entry["few_rows"]["one_adapter"] = True
        if plan.few_rows.tile is not None:
            entry["few_rows"]["tile"] = asdict(plan.few_rows.tile)
    return entry


def load_table(path: Path) -> dict[str, dict[str, GemmPlan]]:
    """Read and check a table file."""
    return parse_table(_read_json(path), str(path))


def load_slot_rank(path: Path) -> int:
    """A table file's ``measured_slot_rank`` (:func:`table_slot_rank`)."""
    return table_slot_rank(_read_json(path), str(path))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise GemmTilesError(f"{path}: {error}") from None


def table_slot_rank(raw: Any, source: str) -> int:
    """A table's ``measured_slot_rank``: the widest slots (``--max-lora-rank``) its routes for
    several adapters were measured at (:data:`MEASURED_SLOT_RANK` where it does not say)."""
    rank = raw.get("measured_slot_rank", MEASURED_SLOT_RANK) if isinstance(raw, dict) else None
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < MEASURED_SLOT_RANK:
        raise GemmTilesError(
            f"{source}: measured_slot_rank is a whole number of at least {MEASURED_SLOT_RANK}, "
            f"not {rank!r}"
        )
    return rank


@functools.cache
def _active_file() -> tuple[dict[str, dict[str, GemmPlan]], int]:
    """The shipped table, or the one ``HI_MOE_LORA_GEMM_TILES`` names (read once), and its
    measured slot rank."""
    chosen = os.environ.get(ENV_GEMM_TILES, "")
    path = Path(chosen) if chosen else TABLE_FILE
    raw = _read_json(path)
    table, slot_rank = parse_table(raw, str(path)), table_slot_rank(raw, str(path))
    if chosen:
        logger.info(
            "fused GEMM tiles from %s (%s; several adapters measured up to slot rank %d)",
            path, ", ".join(sorted(table)) or "empty", slot_rank,
        )  # fmt: skip
    return table, slot_rank


def _active_table() -> dict[str, dict[str, GemmPlan]]:
    """The active table's plans (:func:`_active_file`)."""
    return _active_file()[0]


def measured_slot_rank() -> int:
    """The active table's measured slot rank (:func:`table_slot_rank`)."""
    return _active_file()[1]


def measured_devices() -> frozenset[str]:
    """The GPUs (by name) the active table holds tiles for."""
    return frozenset(name for name, plans in _active_table().items() if plans)


@functools.cache
def plan_for(device_name: str, n: int, k: int) -> GemmPlan:
    """The plan of an ``(n, k)`` weight on the GPU named ``device_name`` (as
    ``torch.cuda.get_device_name`` names it): the measured one; not fused where the table holds
    the GPU but not the shape; :func:`default_plan` on a GPU the table does not hold."""
    plans = _active_table().get(device_name)
    if not plans:
        return default_plan(n, k)
    plan = plans.get(shape_key(n, k))
    return plan if plan is not None else GemmPlan(default_tile(n, k), fuse=False, plain_tile=None)
