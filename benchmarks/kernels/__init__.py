"""Kernel benchmarks: scripts run on a GPU (``gpu_e2e.sh``, ``bench_*.py``, ``tune_*.py``) and
the shapes they share (:mod:`.llama_shapes`)."""
