"""What the deploy tests know of metric names: the series the control plane exports, read from
its code (:class:`registry.metrics.families.ControlPlaneMetrics`), those our vLLM plugins export
(:class:`plugins.metrics.PluginMetrics`), and the metric names a PromQL expression selects.

The PromQL reader is a small tokenizer, not a parser (promtool checks the syntax): it drops
strings, label matchers (``{...}``) and ranges (``[...]``), then keeps the identifiers that are
neither functions nor aggregations (followed by ``(``), nor keywords, nor the label lists of
``by``/``without``/``on``/``ignoring``/``group_left``/``group_right``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from registry.metrics.families import ControlPlaneMetrics

#: The series a family of each type is queried by, as suffixes of the family's name.
SERIES_SUFFIXES: dict[str, tuple[str, ...]] = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
    "info": ("_info",),
    "stateset": ("",),
}


@dataclass(frozen=True)
class Family:
    name: str
    type: str

    @property
    def series(self) -> tuple[str, ...]:
        return tuple(self.name + suffix for suffix in SERIES_SUFFIXES[self.type])


def exported_families() -> list[Family]:
    """Every family a fresh :class:`ControlPlaneMetrics` exports (also those with no sample)."""
    families = [
        Family(metric.name, metric.type) for metric in ControlPlaneMetrics().registry.collect()
    ]
    unknown = {f.type for f in families} - SERIES_SUFFIXES.keys()
    assert not unknown, f"families of a type the deploy tests do not know: {unknown}"
    return families


def plugin_families() -> list[Family]:
    """Every family our vLLM plugins export in vLLM's ``/metrics`` (:class:`plugins.metrics
    .PluginMetrics`, each built at zero)."""
    from prometheus_client import CollectorRegistry

    from plugins.metrics import PluginMetrics

    registry = CollectorRegistry()
    PluginMetrics(registry).build_all()
    return [Family(metric.name, metric.type) for metric in registry.collect()]


def scraped_families() -> list[Family]:
    """What Prometheus scrapes from a deployment: the control plane's families and our vLLM
    plugins' (vLLM's ``/metrics``)."""
    return [*exported_families(), *plugin_families()]


def series_to_family(families: list[Family] | None = None) -> dict[str, str]:
    """Each series name of ``families`` (default: the control plane's) that can be queried ->
    the name of its family."""
    chosen = exported_families() if families is None else families
    return {series: f.name for f in chosen for series in f.series}


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'" + r"|`[^`]*`")
_BRACES = re.compile(r"\{[^{}]*\}")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_TOKEN = re.compile(
    r"(?P<var>\$\{?\w+\}?)|(?P<num>\.?\d[\w.]*)|(?P<ident>[A-Za-z_:][\w:]*)|(?P<other>\S)"
)
#: Followed by a parenthesised list of label names.
_LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
#: Identifiers that are never metric names where they stand (aggregations may be followed by
#: ``by (...)`` before their parenthesis).
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"}
    | {"sum", "avg", "min", "max", "count", "group", "stddev", "stdvar"}
    | {"topk", "bottomk", "quantile", "count_values", "limitk", "limit_ratio"}
)


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects (series or recording-rule names)."""
    text = _BRACKETS.sub(" ", _BRACES.sub(" ", _STRING.sub(" ", expr)))
    tokens = [(m.lastgroup, m.group(0)) for m in _TOKEN.finditer(text) if m.lastgroup != "num"]
    names: set[str] = set()
    i = 0
    while i < len(tokens):
        kind, token = tokens[i]
        following = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if token in _LABEL_LISTS and following == "(":
            i = tokens.index(("other", ")"), i + 1) + 1
            continue
        if kind == "ident" and following != "(" and token.lower() not in _KEYWORDS:
            names.add(token)
        i += 1
    return names
