"""deploy/compose.yaml: a real Compose implementation validates it, and what it wires is checked.

``docker compose config`` (or Debian's ``docker-compose config`` where the v2 plugin is not
installable; ``deploy/compose/install-compose.sh``) parses and validates the file against the
Compose schema and resolves the env file. Then: every ``HI_MOE_LORA_*`` variable is a real
setting of the service that reads it, secrets come only from the env file, the start order,
Prometheus's config passes ``promtool check config`` with the files the compose file mounts, the
alert rules and the dashboard are the repository's own files, and the image's Dockerfile installs
extras that exist.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml

from hi_moe_lora.app.vllm_launch import CUDA_GRAPH_SIZES
from registry.settings import ENV_PREFIX, ControlPlaneSettings
from tests.deploy.conftest import REPO_ROOT, Promtool
from tests.support.vllm_args import parse_serve_args

DEPLOY = REPO_ROOT / "deploy"
COMPOSE_FILE = DEPLOY / "compose.yaml"
COMPOSE_DIR = DEPLOY / "compose"
INSTALL = COMPOSE_DIR / "install-compose.sh"
SECRETS = (
    "POSTGRES_PASSWORD",
    "HI_MOE_LORA_ADMIN_TOKEN",
    "HI_MOE_LORA_RESOLVER_TOKEN",
    "VLLM_API_KEY",
    "GRAFANA_ADMIN_PASSWORD",
)


def _compose_command() -> list[str] | None:
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return ["docker", "compose"]
    found = shutil.which("docker-compose")
    return [found] if found else None


@pytest.fixture(scope="module")
def compose() -> list[str]:
    command = _compose_command()
    if command is None:
        install = subprocess.run(
            ["bash", str(INSTALL)], capture_output=True, text=True, timeout=600, check=False
        )
        command = _compose_command()
        if command is None:
            pytest.fail(f"no Compose implementation and {INSTALL} failed:\n{install.stderr}")
    return command


def _env_file(tmp_path: Path, **values: str) -> Path:
    example = (COMPOSE_DIR / "example.env").read_text()
    lines = []
    for line in example.splitlines():
        key = line.split("=", 1)[0]
        if key in values:
            line = f"{key}={values.pop(key)}"
        lines.append(line)
    path = tmp_path / "compose.env"
    path.write_text("\n".join(lines) + "\n")
    return path


def _config(compose: list[str], env_file: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*compose, "-f", str(COMPOSE_FILE), "--env-file", str(env_file), "config"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO_ROOT,
    )


@pytest.fixture(scope="module")
def resolved(compose: list[str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The compose file as the Compose implementation resolves it, every secret filled."""
    env = _env_file(tmp_path_factory.mktemp("env"), **{k: f"secret-{k.lower()}" for k in SECRETS})
    result = _config(compose, env)
    assert result.returncode == 0, result.stderr
    loaded: dict[str, Any] = yaml.safe_load(result.stdout)
    return loaded


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return loaded


def test_the_compose_file_validates(resolved: dict[str, Any]) -> None:
    services = resolved["services"]
    assert set(services) == {
        "postgres",
        "migrate",
        "control-plane",
        "vllm",
        "prometheus",
        "grafana",
    }
    gpu = services["vllm"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["capabilities"] == ["gpu"]


@pytest.mark.parametrize("missing", SECRETS)
def test_an_empty_secret_is_refused(compose: list[str], tmp_path: Path, missing: str) -> None:
    filled = {k: "x" for k in SECRETS if k != missing}
    result = _config(compose, _env_file(tmp_path, **filled))
    assert result.returncode != 0
    assert f"set {missing} in the env file" in result.stderr


def test_no_secret_is_written_into_the_compose_file(raw: dict[str, Any]) -> None:
    secret_like = re.compile(r"(PASSWORD|_TOKEN|API_KEY|SECRET)$")
    for name, service in raw["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if secret_like.search(key):
                assert re.fullmatch(r"\$\{[A-Z_]+:\?[^}]+\}", str(value)), (name, key)
    url = raw["services"]["migrate"]["environment"]["HI_MOE_LORA_DATABASE_URL"]
    assert "${POSTGRES_PASSWORD:?" in url


def _plugin_variables() -> set[str]:
    found: set[str] = set()
    for path in (REPO_ROOT / "plugins").glob("*.py"):
        found |= set(re.findall(r"HI_MOE_LORA_[A-Z_]+", path.read_text()))
    return found


def test_every_variable_is_a_real_setting(resolved: dict[str, Any]) -> None:
    settings = {ENV_PREFIX + name.upper() for name in ControlPlaneSettings.model_fields}
    for name in ("migrate", "control-plane"):
        variables = {k for k in resolved["services"][name]["environment"] if k.startswith("HI_")}
        assert variables <= settings, (name, sorted(variables - settings))
    vllm = {k for k in resolved["services"]["vllm"]["environment"] if k.startswith("HI_")}
    assert vllm <= _plugin_variables(), sorted(vllm - _plugin_variables())


def test_vllm_starts_with_an_empty_metrics_directory(
    resolved: dict[str, Any], tmp_path: Path
) -> None:
    """vLLM's entrypoint, run by a real shell as the container would (what follows vLLM's own
    arguments swapped for a command that shows the directory): the worker's multiprocess
    directory is emptied of a previous start's files, then vLLM's command line runs unchanged."""
    vllm = resolved["services"]["vllm"]
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "counter_1234.db").write_bytes(b"a previous start's samples")
    entrypoint = [part.replace("$$", "$") for part in vllm["entrypoint"]]
    assert entrypoint[:2] == ["sh", "-c"]
    assert entrypoint[4:] == ["vllm", "serve"]  # (then the command: vLLM's arguments)
    shows = ["sh", "-c", 'echo "files: $(ls -A "$PROMETHEUS_MULTIPROC_DIR")"; echo "$@"', "show"]
    result = subprocess.run(
        [*entrypoint[:4], *shows, *vllm["command"][:2]],
        env={"PATH": "/usr/bin:/bin", "PROMETHEUS_MULTIPROC_DIR": str(metrics)},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert result.stdout.splitlines() == ["files: ", "/models/base --enable-lora"]
    assert vllm["environment"]["PROMETHEUS_MULTIPROC_DIR"].startswith("/tmp/")


def test_vllm_serves_a_graph_per_adapter_count_at_the_measured_sizes(
    resolved: dict[str, Any],
) -> None:
    """vLLM's own parser reads the service's arguments: a CUDA graph per count of active adapters
    and the sizes the launch uses elsewhere (``hi-moe-lora vllm``, the Helm chart)."""
    served = parse_serve_args(resolved["services"]["vllm"]["command"])
    assert served.specialize_active_lora is True
    assert served.cudagraph_capture_sizes == list(CUDA_GRAPH_SIZES)


def test_start_order(resolved: dict[str, Any]) -> None:
    services = resolved["services"]

    def condition(service: str, on: str) -> str:
        return str(services[service]["depends_on"][on]["condition"])

    assert condition("migrate", "postgres") == "service_healthy"
    assert condition("control-plane", "migrate") == "service_completed_successfully"
    assert condition("vllm", "control-plane") == "service_healthy"
    # the control plane's own check must not wait for vLLM (vLLM starts after it)
    assert "/healthz" in " ".join(services["control-plane"]["healthcheck"]["test"])
    assert services["migrate"]["command"] == ["db", "upgrade"]
    assert services["control-plane"]["command"] == ["serve"]


def _mounts(service: dict[str, Any]) -> dict[str, Path]:
    """container path -> host path of a service's bind mounts (as the raw file writes them)."""
    mounts: dict[str, Path] = {}
    for volume in service.get("volumes", []):
        source, target = str(volume).split(":")[:2]
        if source.startswith("."):
            mounts[target] = (DEPLOY / source).resolve()
    return mounts


def test_prometheus_scrapes_what_compose_runs_and_passes_promtool(
    raw: dict[str, Any], promtool: Promtool, tmp_path: Path
) -> None:
    mounts = _mounts(raw["services"]["prometheus"])
    config_path = mounts["/etc/prometheus/prometheus.yml"]
    config = yaml.safe_load(config_path.read_text())
    # the rules it loads are the repository's alert rules, mounted where it looks
    (rule_file,) = config["rule_files"]
    assert mounts[rule_file] == (DEPLOY / "prometheus" / "alerts.yml").resolve()
    targets = {
        job["job_name"]: target
        for job in config["scrape_configs"]
        for static in job["static_configs"]
        for target in static["targets"]
    }
    control_plane_env = raw["services"]["control-plane"]["environment"]
    assert (
        targets["hi-moe-lora-control-plane"]
        == f"control-plane:{control_plane_env['HI_MOE_LORA_PORT']}"
    )
    vllm_urls = control_plane_env["HI_MOE_LORA_VLLM_URLS"]
    assert f"http://{targets['vllm']}" in vllm_urls
    # promtool, with the container's paths pointed at the files mounted there
    config["rule_files"] = [str(mounts[rule_file])]
    local = tmp_path / "prometheus.yml"
    local.write_text(yaml.safe_dump(config))
    result = promtool("check", "config", local)
    assert result.returncode == 0, result.stdout + result.stderr


def test_grafana_is_provisioned_with_the_repositorys_dashboard(raw: dict[str, Any]) -> None:
    grafana = raw["services"]["grafana"]
    mounts = _mounts(grafana)
    dashboards = yaml.safe_load(
        mounts["/etc/grafana/provisioning/dashboards/hi-moe-lora.yml"].read_text()
    )
    (provider,) = dashboards["providers"]
    folder = provider["options"]["path"]
    dashboard_mounts = [c for c, h in mounts.items() if h.suffix == ".json"]
    assert dashboard_mounts == [f"{folder}/hi-moe-lora.json"]
    assert mounts[dashboard_mounts[0]] == (DEPLOY / "grafana" / "hi-moe-lora.json").resolve()
    datasources = yaml.safe_load(
        mounts["/etc/grafana/provisioning/datasources/hi-moe-lora.yml"].read_text()
    )
    (source,) = datasources["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    assert "GF_SECURITY_ADMIN_PASSWORD" in grafana["environment"]


def test_the_image_installs_extras_that_exist_and_runs_real_commands(
    raw: dict[str, Any],
) -> None:
    dockerfile = (COMPOSE_DIR / "Dockerfile").read_text()
    (extras,) = re.findall(r"hi-moe-lora\[([a-z,]+)\]", dockerfile)
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert set(extras.split(",")) <= set(pyproject["project"]["optional-dependencies"])
    assert "hi-moe-lora" in pyproject["project"]["scripts"]
    for service in ("migrate", "control-plane"):
        command = [*raw["services"][service]["command"], "--help"]
        result = subprocess.run(
            [sys.executable, "-m", "hi_moe_lora.app.cli", *command],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, (service, result.stderr)
    plugins = pyproject["project"]["entry-points"]["vllm.general_plugins"]
    wanted = raw["services"]["vllm"]["environment"]["VLLM_PLUGINS"].split(",")
    assert set(wanted) <= set(plugins)
