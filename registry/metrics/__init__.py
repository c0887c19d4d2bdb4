"""Metrics: the control plane's Prometheus families and their exposition (``GET /metrics``).

``families.py`` declares every family (:class:`ControlPlaneMetrics`, one private registry per
app) with small feeding methods; ``labels.py`` the naming rules and bounded label values;
``live.py`` what is read at scrape time (write backlogs, the recent traffic share). The front
door, the dispatcher's caller, warm-up and the health monitor feed it; it imports none of them
(``lint-imports``), only prometheus_client.
"""
