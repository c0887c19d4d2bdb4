"""Fused multi-LoRA (Punica) kernels: one Triton launch per wrapped linear.

Modules (each with one job; none imports torch or triton at package import):

- :mod:`.config`       tile configuration chosen from the static shape of a call;
- :mod:`.worklist`     the per-step work list (adapter slot, token tile) built on the host;
- :mod:`.triton_kernel` the fused shrink+expand Triton kernel and its launcher;
- :mod:`.fallback`     the PyTorch path (CPU hosts, no Triton);
- :mod:`.reference`    the float64 reference used by the tests and the benchmarks;
- :mod:`.ranks`        real per-slot adapter ranks, detected from the stacked weights;
- :mod:`.ops`          the ``hi_moe_lora::lora_linear`` torch custom op.
"""
