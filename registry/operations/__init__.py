"""Operations: keeping the served fleet ready and telling whether it is.

``readiness.py`` (database at head + a healthy upstream: ``/readyz``), ``health.py`` (the health
monitor: upstream checks and adapter probes), ``health_picture.py`` (what it saw),
``warmup.py`` (loading the versions served first), ``served.py`` (which versions are served, in
recent-use order), ``artifacts.py`` (artifact checks on disk). May import the core library, the
registry's services, the fleet of upstreams and the metrics; never the HTTP surface (``api``,
``openai``) or the composition root.
"""
