"""JSON schemas (written here, from each API's reference documentation) for the custom
resources the Helm chart renders, which the bundled Kubernetes schemas do not know: the Gateway
API Inference Extension's ``InferencePool`` (``inference.networking.k8s.io/v1``), Gateway API's
``HTTPRoute`` (``gateway.networking.k8s.io/v1``) and prometheus-operator's ``ServiceMonitor`` and
``PrometheusRule`` (``monitoring.coreos.com/v1``). Only the fields the chart may set are allowed,
so a misspelt or misplaced field fails; required fields are required."""

from __future__ import annotations

from typing import Any

_NAME: dict[str, Any] = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"}
_PORT: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": 65535}
_LABELS: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}
_METADATA: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": _NAME, "namespace": _NAME, "labels": _LABELS, "annotations": _LABELS},
    "additionalProperties": False,
}


def _resource(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": api_version},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": spec,
        },
        "additionalProperties": False,
    }


def _closed(required: list[str], **properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "required": required,
        "properties": properties,
        "additionalProperties": False,
    }


INFERENCE_POOL = _resource(
    "inference.networking.k8s.io/v1",
    "InferencePool",
    _closed(
        ["selector", "targetPorts", "endpointPickerRef"],
        selector=_closed(["matchLabels"], matchLabels=_LABELS),
        targetPorts={
            "type": "array",
            "minItems": 1,
            "maxItems": 8,
            "items": _closed(["number"], number=_PORT),
        },
        appProtocol={"enum": ["http", "kubernetes.io/h2c"]},
        endpointPickerRef=_closed(
            ["name"],
            group={"type": "string"},
            kind={"type": "string"},
            name=_NAME,
            port=_closed(["number"], number=_PORT),
            failureMode={"enum": ["FailOpen", "FailClose"]},
        ),
    ),
)

_PARENT_REF = _closed(
    ["name"],
    name=_NAME,
    namespace=_NAME,
    sectionName=_NAME,
    group={"type": "string"},
    kind={"type": "string"},
)
_BACKEND_REF = _closed(
    ["name"],
    group={"type": "string"},
    kind={"type": "string"},
    name=_NAME,
    port=_PORT,
    weight={"type": "integer", "minimum": 0},
)
_MATCH = _closed(
    [],
    path=_closed(
        [],
        type={"enum": ["Exact", "PathPrefix", "RegularExpression"]},
        value={"type": "string"},
    ),
)
HTTP_ROUTE = _resource(
    "gateway.networking.k8s.io/v1",
    "HTTPRoute",
    _closed(
        ["parentRefs", "rules"],
        parentRefs={"type": "array", "minItems": 1, "items": _PARENT_REF},
        hostnames={"type": "array", "items": {"type": "string"}},
        rules={
            "type": "array",
            "items": _closed(
                [],
                matches={"type": "array", "items": _MATCH},
                backendRefs={"type": "array", "items": _BACKEND_REF},
            ),
        },
    ),
)

SERVICE_MONITOR = _resource(
    "monitoring.coreos.com/v1",
    "ServiceMonitor",
    _closed(
        ["selector", "endpoints"],
        selector=_closed(["matchLabels"], matchLabels=_LABELS),
        endpoints={
            "type": "array",
            "minItems": 1,
            "items": _closed(
                [],
                port={"type": "string"},
                path={"type": "string"},
                interval={"type": "string", "pattern": r"^[0-9]+(ms|s|m|h)$"},
            ),
        },
    ),
)

_RULE = {
    "type": "object",
    "properties": {
        "record": {"type": "string"},
        "alert": {"type": "string"},
        "expr": {"type": ["string", "integer"]},
        "for": {"type": "string"},
        "labels": _LABELS,
        "annotations": _LABELS,
    },
    "required": ["expr"],
    "oneOf": [{"required": ["record"]}, {"required": ["alert"]}],
    "additionalProperties": False,
}
PROMETHEUS_RULE = _resource(
    "monitoring.coreos.com/v1",
    "PrometheusRule",
    _closed(
        ["groups"],
        groups={
            "type": "array",
            "minItems": 1,
            "items": _closed(
                ["name", "rules"],
                name={"type": "string"},
                interval={"type": "string"},
                rules={"type": "array", "minItems": 1, "items": _RULE},
            ),
        },
    ),
)

#: (apiVersion, kind) -> schema
CUSTOM_RESOURCES: dict[tuple[str, str], dict[str, Any]] = {
    ("inference.networking.k8s.io/v1", "InferencePool"): INFERENCE_POOL,
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): HTTP_ROUTE,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR,
    ("monitoring.coreos.com/v1", "PrometheusRule"): PROMETHEUS_RULE,
}
