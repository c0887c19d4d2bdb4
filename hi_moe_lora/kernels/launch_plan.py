"""A layer's launches of the fused kernel, worked out once and reused on every call.

vLLM runs a step larger than its largest CUDA graph op by op, so the LoRA op's host time is paid
on every such step, once per LoRA layer (128 times on the Llama-3-8B shape). What does not
change between a layer's calls is done on its first one: the checks of the stacked weights, the
3-D views and pointer arguments of A, B and B's narrow copies, and, per tile configuration, the
job counts, the reductions and the compile-time arguments. A call then checks its activations,
sizes the grid and the scratch buffers for its token count, and launches: through Triton's JIT
the first time a configuration meets a specialisation, and from then on through the compiled
variant's launcher (:mod:`.direct_launch`); a call whose class an earlier call launched
directly goes straight to that variant (:class:`DirectCall`: no configuration lookup, no
specialisation key).

A layer is known by the Python objects of its weights (vLLM's stacked buffers, which it keeps
for the life of the server) with its output layout; the plan holds references to them, so no
other tensor can take their identity while the plan exists. Plans are kept for at most
:data:`MAX_LAYERS` layers (the oldest go first).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from . import direct_launch
from .config import (
    WIDE_SPLIT_WAVES,
    KernelConfigError,
    TileConfig,
    choose_config,
    config_class,
)
from .fused.flavours import compiled_kernel, interpreted_kernel, kernel_constexprs
from .layout import (
    DoraEpilogue,
    FusedLoRAShapeError,
    check_activations,
    check_narrow_b,
    check_weights,
)
from .reference_loops import stacked_view
from .warm_compile import only_compiling
from .worklist import HEADER_SIZE, MAX_SLICES, pairs_in_counters, record_size, upper_bound_tiles

logger = logging.getLogger(__name__)

#: Programs per SM: enough to hide latency, few enough that idle programs cost one wave.
PROGRAMS_PER_SM = 2
#: Most layers whose plans are kept (a Llama-3-8B server has 128 LoRA layers).
MAX_LAYERS = 1024
#: Most compiled variants one layer's configuration keeps for direct launches (a server meets
#: a handful: aligned or not, one row or many).
MAX_DIRECT_VARIANTS = 64
#: Most call classes one layer keeps for direct launches (:class:`DirectCall`): every decode
#: size met outside a CUDA graph, and the prefill buckets.
MAX_DIRECT_CALLS = 512


@functools.cache
def num_sms(device_index: int) -> int:
    return int(torch.cuda.get_device_properties(device_index).multi_processor_count)


def variant_cache(kernel: Any) -> dict[str, Any] | None:
    """Triton's compiled variants of ``kernel`` for the current device, by key (None if the
    Triton version keeps them elsewhere)."""
    caches = getattr(kernel, "device_caches", None)
    if caches is None:
        return None
    cache: dict[str, Any] = caches[torch.cuda.current_device()][0]
    return cache


@dataclass(frozen=True)
class ConfigLaunch:
    """What every launch of one layer with one tile configuration shares."""

    cfg: TileConfig
    k_split: int
    #: Most jobs of one token tile (every tile wide when the configuration has a wide path).
    jobs_per_tile: int
    #: Whether narrow and wide tiles reduce their partials in the expand jobs, by default.
    reduce_narrow: bool
    reduce_wide: bool
    #: The kernel's compile-time arguments with the default reductions (num_warps and
    #: num_stages included).
    constexprs: dict[str, Any]
    #: Compiled variants for direct launches (:mod:`.direct_launch`), by the reductions and the
    #: call's specialisation, with the constexpr values they are launched with.
    direct: dict[tuple[object, ...], tuple[Any, tuple[Any, ...]]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def with_reductions(self, narrow: bool | None, wide: bool | None) -> dict[str, Any]:
        """The compile-time arguments with the reductions overridden (None: the default)."""
        if narrow is None and wide is None:
            return self.constexprs
        return {
            **self.constexprs,
            "REDUCE_IN_EXPAND": self.reduce_narrow if narrow is None else narrow,
            "WIDE_REDUCE_IN_EXPAND": self.reduce_wide if wide is None else wide,
        }


@dataclass
class LayerLaunch:
    """One layer's launches: its checked weights and the arguments they give the kernel."""

    a: list[torch.Tensor]
    b: list[torch.Tensor]
    narrow_b: list[torch.Tensor]
    counters: torch.Tensor
    offset_start: int
    add_inputs: bool
    dora: DoraEpilogue | None
    #: The objects the layer is known by (kept alive with the plan, see the module docstring).
    identity: tuple[object, ...]
    #: Whether its prefill-sized variants have been compiled (see
    #: :func:`.triton_kernel.precompile_prefill_variants`).
    precompiled: bool = False
    widths: tuple[int, ...] = field(init=False)
    #: The kernel's arguments from A's pointers to B's narrow copies' (in the kernel's order).
    pointer_args: tuple[torch.Tensor, ...] = field(init=False)
    #: The slices' output widths as the kernel takes them (absent slices 0).
    _width_args: tuple[int, ...] = field(init=False)
    #: The kernel's arguments from A's slot stride to ``pair_cap``.
    _stride_args: tuple[int, ...] = field(init=False)
    pair_cap: int = field(init=False)
    _by_config: dict[TileConfig, ConfigLaunch] = field(init=False, default_factory=dict)
    #: Calls launched directly, by class (:meth:`call_class`; default options only).
    _direct_calls: dict[tuple[object, ...], DirectCall] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        a, b, nb = self.a, self.b, self.narrow_b
        self.widths = tuple(t.shape[1] for t in b)
        # One pointer per slice (absent slices repeat the first): offsets between the slices'
        # tensors would be typed i32 or i64 by their value, and so multiply compiled variants.
        self.pointer_args = (
            *[*a, a[0], a[0]][:MAX_SLICES],
            *[*b, b[0], b[0]][:MAX_SLICES],
            *[*nb, nb[0], nb[0]][:MAX_SLICES],
        )
        self._width_args = (*self.widths, 0, 0)[:MAX_SLICES]
        self.pair_cap = pairs_in_counters(self.counters.numel())
        self._stride_args = (
            a[0].stride(0), a[0].stride(1), b[0].stride(1), nb[0].stride(1), self.offset_start,
            self.pair_cap,
        )  # fmt: skip

    @property
    def k(self) -> int:
        return int(self.a[0].shape[2])

    @property
    def n_total(self) -> int:
        return sum(self.widths)

    @property
    def y_end(self) -> int:
        return self.offset_start + sum(self.widths)

    def for_config(self, cfg: TileConfig) -> ConfigLaunch:
        """The launch parameters shared by every call with ``cfg`` (checked on first use)."""
        known = self._by_config.get(cfg)
        if known is not None:
            return known
        if cfg.rank_pad < self.a[0].shape[1]:
            raise FusedLoRAShapeError(
                f"padded rank {cfg.rank_pad} < stacked rank {self.a[0].shape[1]}"
            )
        try:
            cfg.check()
        except KernelConfigError as exc:
            raise FusedLoRAShapeError(str(exc)) from exc
        k_split = cfg.k_split(self.k)
        wide = cfg.rank_pad > cfg.block_r
        per_tile = len(self.a) * k_split * (cfg.wide_split if wide else 1)
        reduce_narrow = cfg.reduces_in_expand(self.k, self.widths)
        reduce_wide = cfg.reduces_in_expand(self.k, self.widths, wide=True)
        upcast_dot = not self.a[0].is_cuda and self.a[0].dtype == torch.bfloat16
        constexprs = kernel_constexprs(
            cfg, len(self.a), k_split, (reduce_narrow, reduce_wide), self.add_inputs,
            self.dora is not None, upcast_dot,
        ) | {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}  # fmt: skip
        made = ConfigLaunch(
            cfg,
            k_split,
            per_tile + cfg.expand_jobs(self.widths, wide=wide),
            reduce_narrow,
            reduce_wide,
            constexprs,
        )
        self._by_config[cfg] = made
        return made

    def launch(
        self,
        y: torch.Tensor,
        x: torch.Tensor,
        tiles_by_block_m: dict[int, torch.Tensor],
        scale: float,
        min_rank: int,
        m: int,
        *,
        config: TileConfig | None = None,
        max_programs: int | None = None,
        reductions: tuple[bool | None, bool | None] = (None, None),
        split_jobs: int | None = None,
        compile_only: bool = False,
    ) -> TileConfig:
        """Launch (or, with ``compile_only``, only compile) the kernel configured for ``m`` rows.

        ``reductions``: whether narrow and wide tiles reduce in the expand jobs; ``split_jobs``:
        the most jobs for which wide tiles are split (None: the defaults). A call with the
        defaults whose class (:meth:`call_class`) an earlier call launched directly goes
        straight to that variant (:class:`DirectCall`)."""
        defaults = (
            config is None
            and max_programs is None
            and split_jobs is None
            and reductions == (None, None)
            and not compile_only
        )
        if defaults and self._direct_calls and direct_launch.SWITCH.on:
            direct = self._direct_calls.get(self.call_class(x, y, m))
            if (
                direct is not None
                and tiles_by_block_m[direct.plan.cfg.block_m] is direct.tiles
                and not only_compiling()
            ):
                direct.launch(self, y, x, scale, min_rank)
                return direct.plan.cfg
        on_gpu = x.is_cuda
        sms = num_sms(x.get_device()) if on_gpu else 4
        a0 = self.a[0]
        cfg = config or choose_config(m, self.k, self.n_total, a0.shape[1], sms, a0.shape[0])
        plan = self.for_config(cfg)
        tiles = tiles_by_block_m[cfg.block_m]
        tile_room = (tiles.numel() - HEADER_SIZE) // record_size(cfg.block_m)
        cap = max_programs if max_programs is not None else (sms * PROGRAMS_PER_SM)
        grid, pairs = self.grid(plan, x.shape[0], tile_room, cap)
        if split_jobs is None:
            split_jobs = WIDE_SPLIT_WAVES * grid
        part, inter = self.scratch(plan, pairs, x.device)
        args = self.arguments(y, x, tiles, part, inter, min_rank, split_jobs, scale)
        constexprs = plan.with_reductions(*reductions)
        kernel = compiled_kernel() if on_gpu else interpreted_kernel()
        if compile_only or only_compiling():
            if on_gpu:  # (the interpreter has nothing to compile)
                kernel.warmup(*args, grid=(grid,), **constexprs)
            return cfg
        dora_args = self.dora_arguments(part)
        direct_key = None
        if on_gpu and direct_launch.SWITCH.on:
            direct_key = direct_launch.call_key(
                (x, y, tiles, part, inter, dora_args[0], dora_args[1]),
                (x.shape[1], *x.stride(), *y.stride(), dora_args[2]),
                (x.shape[0], min_rank, split_jobs),
            )
        if direct_key is not None:
            direct_key = (*reductions, *direct_key)
            known_variant = plan.direct.get(direct_key)
            if known_variant is not None:
                compiled, values = known_variant
                direct_launch.launch(compiled, grid, x.get_device(), args, values)
                if defaults:
                    self._keep_direct_call(x, y, m, plan, tiles, tile_room, cap, known_variant)
                return cfg
        variants = variant_cache(kernel) if on_gpu else None
        known = len(variants) if variants is not None else None
        compiled = kernel[(grid,)](*args, **constexprs)
        if direct_key is not None and compiled is not None:
            keep_for_direct_launch(plan, direct_key, kernel, compiled, len(args), constexprs)
        if known is not None and variants is not None and len(variants) > known:
            # Expected while vLLM captures its CUDA graphs; during serving it names the variant
            # behind a JIT stall (vLLM's own monitor names only the kernel).
            logger.info(
                "fused LoRA kernel compiled for M=%d K=%d N=%s with %s: %s",
                x.shape[0],
                x.shape[1],
                list(self.widths),
                cfg,
                list(variants)[known:],  # (a dict keeps its insertion order)
            )
        return cfg

    def grid(self, plan: ConfigLaunch, rows: int, tile_room: int, cap: int) -> tuple[int, int]:
        """The launch's programs and (tile, slice) pairs for a call of ``rows`` token rows, with
        a work list of ``tile_room`` tiles and at most ``cap`` programs."""
        tiles_ub = min(upper_bound_tiles(rows, self.n_slots, plan.cfg.block_m), tile_room)
        pairs = tiles_ub * len(self.a)
        if pairs > self.pair_cap:
            raise FusedLoRAShapeError(f"{pairs} tile pairs > counter capacity {self.pair_cap}")
        return max(1, min(tiles_ub * plan.jobs_per_tile, cap)), pairs

    def scratch(
        self, plan: ConfigLaunch, pairs: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The launch's scratch: the shrink's fp32 partial sums and the intermediate."""
        tile_elems = plan.cfg.block_m * plan.cfg.rank_pad
        return (
            torch.empty(pairs * plan.k_split * tile_elems, dtype=torch.float32, device=device),
            torch.empty(pairs * tile_elems, dtype=self.a[0].dtype, device=device),
        )

    def arguments(
        self,
        y: torch.Tensor,
        x: torch.Tensor,
        tiles: torch.Tensor,
        part: torch.Tensor,
        inter: torch.Tensor,
        min_rank: int,
        split_jobs: int,
        scale: float,
    ) -> tuple[Any, ...]:
        """The kernel's runtime arguments, in its order."""
        return (
            x, y, *self.pointer_args, tiles, part, inter, self.counters, *self._width_args,
            *x.shape, *x.stride(), *y.stride(), *self._stride_args, int(min_rank),
            int(split_jobs), float(scale), *self.dora_arguments(part),
        )  # fmt: skip

    def dora_arguments(self, part: torch.Tensor) -> tuple[Any, ...]:
        """The DoRA epilogue's arguments, the kernel's last: its scales, live flags and the
        scales' row stride. Without DoRA the epilogue is compiled out and its pointers are
        placeholders of the same types (the call's partials, the counters)."""
        dora = self.dora
        if dora is None:
            return (part, self.counters, 0)
        return (dora.scales, dora.live, dora.scales.stride(0))

    @property
    def n_slots(self) -> int:
        return int(self.a[0].shape[0])

    def call_class(self, x: torch.Tensor, y: torch.Tensor, m: int) -> tuple[object, ...]:
        """What decides a call's variant and configuration beyond the layer's weights (the
        default options taken): the class of its token count (:func:`.config.config_class`),
        its activations' dtypes, strides and whether their addresses are multiples of 16 (its
        scratch buffers always are: torch's caching allocator aligns every block)."""
        return (
            config_class(m), x.dtype, y.dtype, x.stride(), y.stride(), x.data_ptr() % 16 == 0,
            y.data_ptr() % 16 == 0,
        )  # fmt: skip

    def _keep_direct_call(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        m: int,
        plan: ConfigLaunch,
        tiles: torch.Tensor,
        tile_room: int,
        cap: int,
        variant: tuple[Any, tuple[Any, ...]],
    ) -> None:
        """Keep a variant launched directly for the later calls of this call's class."""
        if len(self._direct_calls) >= MAX_DIRECT_CALLS:
            return
        compiled, values = variant
        self._direct_calls[self.call_class(x, y, m)] = DirectCall(
            plan, tiles, tile_room, cap, compiled, values, x.get_device()
        )


@dataclass(frozen=True)
class DirectCall:
    """What every call of one class (:meth:`LayerLaunch.call_class`) with the default options
    shares, once its variant has been launched directly: its configuration, work-list tiles,
    programs cap and compiled variant. Such a call only sizes its grid and scratch buffers for
    its token rows and launches (no configuration lookup, no specialisation key)."""

    plan: ConfigLaunch
    tiles: torch.Tensor
    tile_room: int
    cap: int
    compiled: Any
    constexprs: tuple[Any, ...]
    device: int

    def launch(
        self, layer: LayerLaunch, y: torch.Tensor, x: torch.Tensor, scale: float, min_rank: int
    ) -> None:
        """Launch this call (an integer argument beyond 32 bits, which Triton would type 64-bit,
        is refused: no server's call has one)."""
        rows = x.shape[0]
        if not (0 <= rows <= direct_launch.I32_MAX and 0 <= min_rank <= direct_launch.I32_MAX):
            raise FusedLoRAShapeError(f"{rows} rows, min_rank {min_rank}: beyond 32 bits")
        grid, pairs = layer.grid(self.plan, rows, self.tile_room, self.cap)
        part, inter = layer.scratch(self.plan, pairs, x.device)
        split_jobs = WIDE_SPLIT_WAVES * grid
        args = layer.arguments(y, x, self.tiles, part, inter, min_rank, split_jobs, scale)
        direct_launch.launch(self.compiled, grid, self.device, args, self.constexprs)


def keep_for_direct_launch(
    plan: ConfigLaunch,
    key: tuple[object, ...],
    kernel: Any,
    compiled: Any,
    runtime_args: int,
    constexprs: dict[str, Any],
) -> None:
    """Keep a variant the JIT returned for the configuration's later calls with ``key``."""
    if len(plan.direct) >= MAX_DIRECT_VARIANTS:
        return
    values = direct_launch.trailing_constexprs(kernel, runtime_args, constexprs)
    if values is None:
        logger.warning("fused LoRA kernel: parameters not as expected; no direct launches")
        direct_launch.SWITCH.set(False)
        return
    plan.direct[key] = (compiled, values)


_LAYERS: dict[tuple[object, ...], LayerLaunch] = {}


def layer_launch(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a: Sequence[torch.Tensor],
    lora_b: Sequence[torch.Tensor],
    counters: torch.Tensor,
    offset_start: int,
    add_inputs: bool,
    dora: DoraEpilogue | None,
    narrow_b: Sequence[torch.Tensor] | None,
) -> LayerLaunch:
    """The plan of the layer these weights belong to, made on its first call (checks ``x``
    and ``y`` against it; raises :class:`.layout.FusedLoRAShapeError`)."""
    key = (
        *map(id, lora_a), None, *map(id, lora_b), None, *map(id, narrow_b or ()), id(counters),
        id(dora.scales) if dora is not None else None,
        id(dora.live) if dora is not None else None,
        offset_start, add_inputs, y.shape[-1],
    )  # fmt: skip
    layer = _LAYERS.get(key)
    if layer is None:
        identity: tuple[object, ...] = (
            *lora_a, None, *lora_b, None, *(narrow_b or ()), counters,
            dora.scales if dora is not None else None,
            dora.live if dora is not None else None,
        )  # fmt: skip
        layer = _new_layer(
            y, lora_a, lora_b, counters, offset_start, add_inputs, dora, narrow_b, identity
        )
        if len(_LAYERS) >= MAX_LAYERS:
            del _LAYERS[next(iter(_LAYERS))]
        _LAYERS[key] = layer
    check_activations(x, y, layer.k, layer.y_end)
    return layer


def _new_layer(
    y: torch.Tensor,
    lora_a: Sequence[torch.Tensor],
    lora_b: Sequence[torch.Tensor],
    counters: torch.Tensor,
    offset_start: int,
    add_inputs: bool,
    dora: DoraEpilogue | None,
    narrow_b: Sequence[torch.Tensor] | None,
    identity: tuple[object, ...],
) -> LayerLaunch:
    a = [stacked_view(t) for t in lora_a]
    b = [stacked_view(t) for t in lora_b]
    check_weights(a, b)
    nb = b
    if narrow_b is not None:
        nb = [stacked_view(t) for t in narrow_b]
        check_narrow_b(b, nb)
    if dora is not None:
        dora.check(y, a[0].shape[0], offset_start, add_inputs)
    return LayerLaunch(a, b, nb, counters, offset_start, add_inputs, dora, identity)


def forget_layers() -> None:
    """Drop every layer's plan (tests; a server keeps its layers for its life)."""
    _LAYERS.clear()
