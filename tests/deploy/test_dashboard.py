"""deploy/grafana/hi-moe-lora.json: variables, targets; queries parse and use exported families."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import REPO_ROOT, Promtool, output
from tests.deploy.metric_names import metric_names, scraped_families, series_to_family

DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "hi-moe-lora.json"
DATASOURCE = "${datasource}"
#: Families deliberately left off the dashboard: a family added to registry/metrics/families.py
#: or plugins/metrics.py fails test_every_family_is_on_the_dashboard until it gets a panel or is
#: named here.
#: The share as one instance sees it: the dashboard divides every instance's window counts
#: (``traffic_window_requests``) instead, which is exact across instances and workers.
NOT_ON_DASHBOARD: frozenset[str] = frozenset({"hi_moe_lora_traffic_share_ratio"})
#: Grafana's interval variables, and what promtool gets in their place.
_INTERVALS = re.compile(r"\$\{?(__rate_interval|__interval|__range)\b\}?")
_VARIABLE = re.compile(r"\$\{?\w+\}?")


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those of collapsed rows included; rows themselves are left out."""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def _exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) of every target."""
    return [
        (panel["title"], target["expr"])
        for panel in _panels(dashboard)
        for target in panel["targets"]
    ]


def _for_promtool(expr: str) -> str:
    """``expr`` with Grafana's variables replaced: intervals by 5m, the others by ``.*``."""
    return _VARIABLE.sub(".*", _INTERVALS.sub("5m", expr))


def test_the_dashboard_has_the_variables() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    specialist = variables["specialist"]
    assert specialist["type"] == "query"
    assert specialist["datasource"]["uid"] == DATASOURCE
    assert specialist["definition"] == "label_values(hi_moe_lora_requests_total, specialist)"
    assert specialist["query"]["query"] == specialist["definition"]
    assert specialist["includeAll"]
    assert specialist["allValue"] == ".*"


def test_every_panel_has_a_target_on_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    panels = list(_panels(dashboard))
    assert len(panels) >= 15
    ids = [panel["id"] for panel in dashboard["panels"]] + [
        p["id"] for row in dashboard["panels"] for p in row.get("panels", [])
    ]
    assert len(ids) == len(set(ids)), "panel ids are not unique"
    for panel in panels:
        title = panel["title"]
        assert panel["targets"], f"panel {title!r} has no target"
        assert panel["datasource"]["uid"] == DATASOURCE, title
        for target in panel["targets"]:
            assert target["expr"].strip(), f"panel {title!r} has an empty query"
            assert target["datasource"]["uid"] == DATASOURCE, title
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), title


def test_the_queries_use_only_exported_series(dashboard: dict[str, Any]) -> None:
    exported = series_to_family(scraped_families())
    for title, expr in _exprs(dashboard):
        names = metric_names(expr)
        assert names, f"panel {title!r}: no metric in {expr!r}"
        unknown = names - exported.keys()
        assert not unknown, (
            f"panel {title!r} queries {sorted(unknown)}, which neither the control plane "
            "(registry/metrics/families.py, live.py) nor the plugins (plugins/metrics.py) export"
        )


def test_every_family_is_on_the_dashboard(dashboard: dict[str, Any]) -> None:
    exported = series_to_family(scraped_families())
    names = {name for _, expr in _exprs(dashboard) for name in metric_names(expr)}
    used = {exported[name] for name in names if name in exported}
    families = {f.name for f in scraped_families()}
    assert families >= NOT_ON_DASHBOARD, "NOT_ON_DASHBOARD names a family that does not exist"
    missing = families - NOT_ON_DASHBOARD - used
    assert not missing, f"families on no panel: {sorted(missing)}"


def test_the_checker_rejects_an_unknown_series() -> None:
    exported = series_to_family()
    typo = 'sum(rate(hi_moe_lora_request_total{specialist=~"$specialist"}[$__rate_interval]))'
    assert metric_names(typo) - exported.keys() == {"hi_moe_lora_request_total"}
    gauge_as_counter = "rate(hi_moe_lora_upstream_up_total[5m])"
    assert metric_names(gauge_as_counter) - exported.keys() == {"hi_moe_lora_upstream_up_total"}


def test_promtool_parses_every_query(
    dashboard: dict[str, Any], promtool: Promtool, tmp_path: Path
) -> None:
    rules = [
        {"record": f"dashboard:query:{i}", "expr": _for_promtool(expr)}
        for i, (_, expr) in enumerate(_exprs(dashboard))
    ]
    rule_file = tmp_path / "dashboard_queries.yml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = promtool("check", "rules", rule_file)
    assert result.returncode == 0, output(result)


def test_promtool_rejects_a_broken_query(promtool: Promtool, tmp_path: Path) -> None:
    broken = _for_promtool("sum by (tier (rate(hi_moe_lora_dispatch_decisions_total[$__interval]))")
    rule_file = tmp_path / "broken.yml"
    rule_file.write_text(
        yaml.safe_dump({"groups": [{"name": "b", "rules": [{"record": "b:q", "expr": broken}]}]})
    )
    result = promtool("check", "rules", rule_file)
    assert result.returncode != 0, output(result)
