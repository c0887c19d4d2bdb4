"""Metrics: the control plane's Prometheus exposition (``/metrics``).

Will own per-adapter request, latency and load counters fed by the front door's outcome stream
and the operations' probes. May import the core library and the registry's services; the HTTP
surface mounts its endpoint. Empty until the metrics issue lands.
"""
