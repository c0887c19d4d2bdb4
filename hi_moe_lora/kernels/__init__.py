"""Fused multi-LoRA (Punica) kernels: one Triton launch per wrapped linear.

Modules (each with one job; none imports torch or triton at package import):

- :mod:`.config`       tile configuration chosen from the static shape of a call;
- :mod:`.worklist`     the per-step work list (adapter slot, token tile) built on the host;
- :mod:`.fused`        the fused shrink+expand Triton kernel (records, shrink, expand, ticket
  loop, flavours);
- :mod:`.triton_kernel` its launcher;
- :mod:`.fallback`     the PyTorch path (CPU hosts, no Triton);
- :mod:`.reference_loops` the float64 reference with host loops (tests and benchmarks);
- :mod:`.reference_op` the float64 reference as a graph-safe custom op, served by
  ``HI_MOE_LORA_KERNELS=reference`` for correctness probes;
- :mod:`.logits_gate`  skips vLLM's logits LoRA while no loaded adapter has LM-head weights;
- :mod:`.prompt_logits` the logits LoRA over one request's prompt rows (prompt log-probabilities);
- :mod:`.ranks`        real per-slot adapter ranks, detected from the stacked weights;
- :mod:`.ops`          the ``hi_moe_lora::lora_linear`` torch op;
- :mod:`.gemm_lora`    the base GEMM with LoRA inside (one adapter in its K loop, several
  expanded in its epilogue), :mod:`.gemm_shrink` the split form's shrink ahead of it,
  :mod:`.gemm_tiles` their measured tiles and plans per GPU, :mod:`.gemm_op` the
  ``hi_moe_lora::gemm_lora_linear`` torch op that picks among them;
- :mod:`.kernel_flavour` a kernel function compiled for CUDA, or interpreted;
- :mod:`.op_registry`  registers the package's torch ops (without ``custom_op``'s call cost).
"""
