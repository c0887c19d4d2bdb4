"""deploy/prometheus/alerts.yml: promtool check and unit tests; rules query only exported series."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import PROMETHEUS_DIR, Promtool, output
from tests.deploy.metric_names import (
    exported_families,
    metric_names,
    plugin_families,
    scraped_families,
    series_to_family,
)

ALERTS = PROMETHEUS_DIR / "alerts.yml"
ALERTS_TEST = PROMETHEUS_DIR / "tests" / "alerts_test.yml"

#: The alerts the rules must define (more may be added).
REQUIRED_ALERTS = {
    "AdapterLoadSlow",
    "SpecialistSuccessRateLow",
    "AdapterTrafficImbalanced",
    "UpstreamDown",
    "AdapterUnhealthy",
}


def _rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(ALERTS.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_promtool_checks_the_rules(promtool: Promtool) -> None:
    result = promtool("check", "rules", ALERTS)
    assert result.returncode == 0, output(result)
    assert "SUCCESS" in result.stdout, output(result)


def test_promtool_unit_tests_pass(promtool: Promtool) -> None:
    result = promtool("test", "rules", ALERTS_TEST)
    assert result.returncode == 0, output(result)
    assert "SUCCESS" in result.stdout, output(result)


def test_a_broken_rule_file_fails_the_check(promtool: Promtool, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "groups:\n"
        "  - name: broken\n"
        "    rules:\n"
        "      - alert: Broken\n"
        "        expr: sum by (specialist) (rate(hi_moe_lora_requests_total[10m]) > \n"
    )
    result = promtool("check", "rules", broken)
    assert result.returncode != 0, output(result)


def test_a_wrong_expectation_fails_the_unit_tests(promtool: Promtool, tmp_path: Path) -> None:
    """The unit tests compare what they expect: UpstreamDown firing while the upstream is up."""
    tests = tmp_path / "wrong_test.yml"
    tests.write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(ALERTS)],
                "evaluation_interval": "1m",
                "tests": [
                    {
                        "interval": "1m",
                        "input_series": [
                            {"series": 'hi_moe_lora_upstream_up{upstream="u"}', "values": "1x10"}
                        ],
                        "alert_rule_test": [
                            {
                                "eval_time": "5m",
                                "alertname": "UpstreamDown",
                                "exp_alerts": [
                                    {"exp_labels": {"severity": "critical", "upstream": "u"}}
                                ],
                            }
                        ],
                    }
                ],
            }
        )
    )
    result = promtool("test", "rules", tests)
    assert result.returncode != 0, output(result)
    assert "UpstreamDown" in result.stdout + result.stderr, output(result)


def test_every_alert_is_defined_labelled_and_annotated() -> None:
    alerts = {rule["alert"]: rule for rule in _rules() if "alert" in rule}
    assert alerts.keys() >= REQUIRED_ALERTS
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        assert {"summary", "description"} <= rule["annotations"].keys(), name


def test_every_alert_has_unit_tests_that_fire_and_that_do_not() -> None:
    tests = yaml.safe_load(ALERTS_TEST.read_text())["tests"]
    cases = [case for test in tests for case in test.get("alert_rule_test", [])]
    alerts = {rule["alert"] for rule in _rules() if "alert" in rule}
    fires = {c["alertname"] for c in cases if c.get("exp_alerts")}
    stays_quiet = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    assert alerts - fires == set(), "alerts never tested firing"
    assert alerts - stays_quiet == set(), "alerts never tested staying quiet"


def test_the_rules_query_only_exported_series() -> None:
    exported = series_to_family(scraped_families())
    recorded = {rule["record"] for rule in _rules() if "record" in rule}
    for rule in _rules():
        names = metric_names(rule["expr"])
        assert names, f"no metric found in {rule['expr']!r}"
        unknown = names - exported.keys() - recorded
        assert not unknown, (
            f"{rule.get('alert') or rule.get('record')} queries {sorted(unknown)}, which "
            f"neither the control plane (registry/metrics/families.py, live.py) nor the "
            f"plugins (plugins/metrics.py) export"
        )


def test_exported_series_are_read_from_the_code() -> None:
    families = {f.name: f.type for f in exported_families()}
    assert families["hi_moe_lora_requests"] == "counter"
    assert families["hi_moe_lora_adapter_load_seconds"] == "histogram"
    assert families["hi_moe_lora_upstream_up"] == "gauge"
    assert families["hi_moe_lora_statistics_dropped"] == "counter"  # read at scrape time
    exported = series_to_family()
    assert exported["hi_moe_lora_requests_total"] == "hi_moe_lora_requests"
    assert exported["hi_moe_lora_adapter_load_seconds_bucket"] == "hi_moe_lora_adapter_load_seconds"
    assert "hi_moe_lora_requests" not in exported  # a counter is queried with _total
    assert "hi_moe_lora_upstream_up_total" not in exported
    plugins = series_to_family(plugin_families())
    assert plugins["hi_moe_lora_kernel_late_compiles_total"] == "hi_moe_lora_kernel_late_compiles"
    assert plugins["hi_moe_lora_resolver_duration_seconds_count"] == (
        "hi_moe_lora_resolver_duration_seconds"
    )
    assert not plugins.keys() & exported.keys()  # (two processes, two sets of names)


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'histogram_quantile(0.9, sum by (source, le) (rate(a_bucket{x="b_total"}[10m])))'
            " > 0.5 and sum by (source) (rate(a_count[10m])) * 600 >= 5",
            {"a_bucket", "a_count"},
        ),
        (
            'r:x:rate10m{specialist!="_base"} / on () group_left () sum(r:x:rate10m) > 0.5'
            " and on () sum without (le) (y) offset 5m >= 1e3",
            {"r:x:rate10m", "y"},
        ),
        ("up == 0 unless on (upstream) down", {"up", "down"}),
        (
            'sum(increase(g{specialist=~"$specialist"}[$__rate_interval])) by (tier)',
            {"g"},
        ),
        ("count(count by (v) (h))", {"h"}),
    ],
)
def test_metric_names_are_read_from_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names
