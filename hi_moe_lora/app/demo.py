"""The end-to-end demo on the embedded default (vLLM CPU + tiny local model + SQLite).

It builds the tiny model and adapters, starts the control plane and vLLM with our plugins,
registers two versions of ``python-lora``, one ``math-lora``, a DoRA ``docs-lora`` and an AdaLoRA
``sql-lora`` (converted into plain LoRA at registration) through the admin API, sends requests
with the stock ``openai`` client naming each, promotes, rolls back, sends ``model="auto"`` tasks
that the dispatcher routes (or leaves to the base model), and prints which model answered each
time; then warms the specialists up on demand and shows the health monitor's picture, the request
metrics and the audit log. Everything is shut down at the end,
also on Ctrl-C or failure.

It runs the secure setup: access control on, with an admin and a resolver token generated for the
run (or given), an API key made through the admin API (``POST /admin/v1/tokens``) for its ``/v1``
calls, and every change audited under the admin token's name. It never prints a secret.

Needs the ``demo`` extra (control plane + openai + tiny-model builders) and vLLM.
"""

from __future__ import annotations

import logging
import shutil
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hi_moe_lora.app.embedded import EmbeddedStack
from hi_moe_lora.control_api import ControlPlaneClient, ControlPlaneError
from hi_moe_lora.tinymodel import build_fleet
from registry.access.secrets import new_secret

logger = logging.getLogger(__name__)

SERVED_HEADER = "x-himoe-served-model"
SPECIALIST_HEADER = "x-himoe-specialist"
TIER_HEADER = "x-himoe-dispatch-tier"
FALLBACK_HEADER = "x-himoe-fallback-reason"
#: model="auto" tasks: (step, objective, context refs)
AUTO_TASKS: tuple[tuple[str, str, list[str]], ...] = (
    ("auto: a Python testing task", "Write a pytest test for my parse_date() helper", []),
    ("auto: a file reference", "Why does this fail on the second call?", ["src/solver.py"]),
    ("auto: nothing fits", "What is a good recipe for banana bread?", []),
)
PROMPT = "def fibonacci(n):"
#: The name of the demo's API key (what the statistics show for its requests).
API_KEY_NAME = "demo-client"


@dataclass(frozen=True)
class DemoAnswer:
    """One request of the demo and who answered it."""

    requested: str
    served_by: str
    text: str


def _ask(openai_client: Any, model: str, stream: bool = False) -> DemoAnswer:
    if stream:
        chunks = openai_client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": PROMPT}],
            max_tokens=8,
            temperature=0.0,
            stream=True,
        )
        parts: list[str] = []
        served = ""
        for chunk in chunks:
            served = chunk.model
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
        return DemoAnswer(model, served, "".join(parts))
    raw = openai_client.completions.with_raw_response.create(
        model=model, prompt=PROMPT, max_tokens=8, temperature=0.0
    )
    completion = raw.parse()
    served = raw.headers.get(SERVED_HEADER, completion.model)
    return DemoAnswer(model, served, completion.choices[0].text)


def _ask_auto(openai_client: Any, objective: str, refs: list[str]) -> DemoAnswer:
    """``model="auto"``: the dispatcher picks the specialist (or the base model) for the task."""
    raw = openai_client.chat.completions.with_raw_response.create(
        model="auto",
        messages=[{"role": "user", "content": objective}],
        max_tokens=8,
        temperature=0.0,
        extra_body={"dispatch": {"context_refs": refs}} if refs else None,
    )
    completion = raw.parse()
    specialist = raw.headers.get(SPECIALIST_HEADER, "?")
    tier = raw.headers.get(TIER_HEADER, "?")
    served = raw.headers.get(SERVED_HEADER, completion.model)
    if specialist == "none":
        served = f"base ({raw.headers.get(FALLBACK_HEADER, 'no match')})"
    text = completion.choices[0].message.content or ""
    return DemoAnswer("auto", f"{served} [{tier}]", text)


def _show(step: str, answer: DemoAnswer) -> None:
    print(
        f"  {step:<34} model={answer.requested!r:<22} served by {answer.served_by:<20}"
        f" text={answer.text!r}"
    )


def _wait_for_probes(admin: ControlPlaneClient, served: list[str], timeout_s: float = 60) -> None:
    """Until the health monitor has probed ``served`` (it does at once after a registration)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = {a["served_name"] for u in admin.health()["upstreams"] for a in u["adapters"]}
        if set(served) <= seen:
            return
        time.sleep(0.5)


def _operations(admin: ControlPlaneClient, control_plane_url: str) -> None:
    """Warm-up on demand, the health picture and a few metrics."""
    print("\nWarm-up (POST /admin/v1/warmup), health (GET /v1/health), metrics (GET /metrics):")
    report = admin.warmup(["python-lora", "math-lora"])
    for result in report["results"]:
        load = f", load {result['load_ms']:.0f} ms" if result["load_ms"] is not None else ""
        print(
            f"  warm-up {result['served_name']}: {result['outcome']} in "
            f"{result['time_ms']:.0f} ms{load}"
        )
    for upstream in admin.health()["upstreams"]:
        print(f"  upstream {upstream['url']}: {'up' if upstream['up'] else 'down'}")
        for adapter in upstream["adapters"]:
            verdict = "healthy" if adapter["healthy"] else f"unhealthy: {adapter['reason']}"
            print(f"    {adapter['served_name']}: {verdict}")
    with urllib.request.urlopen(f"{control_plane_url}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    shown = (
        "hi_moe_lora_requests_total{",
        "hi_moe_lora_adapter_cache_requests_total{",
        "hi_moe_lora_client_requests_total{",
        # which replica answered, and why (adapter affinity: loaded / home / spill / failover)
        "hi_moe_lora_upstream_routes_total{",
    )
    for line in text.splitlines():
        if line.startswith(shown) and not line.endswith(" 0.0"):
            print(f"  {line}")


def _access(admin: ControlPlaneClient, control_plane_url: str) -> str:
    """Show that access control is on; create the demo's API key and return its secret."""
    print("\nAccess control (admin token from HI_MOE_LORA_ADMIN_TOKEN, generated for this run):")
    try:
        ControlPlaneClient(control_plane_url, timeout_s=30.0).list_adapters()
        print("  WARNING: the admin API answered without a token")
    except ControlPlaneError as exc:
        print(f"  the admin API without a token: HTTP {exc.status} ({exc.code})")
    print(f"  access: {admin.access()['access']}")
    key = admin.create_token(API_KEY_NAME, "inference")
    print(
        f"  API key {key['name']!r} created (POST /admin/v1/tokens, scope {key['scope']});"
        " the openai client sends it as api_key="
    )
    secret: str = key["token"]
    return secret


def _audit(admin: ControlPlaneClient) -> None:
    print("\nAudit log (GET /admin/v1/audit, newest first):")
    for event in admin.audit(limit=8)["events"]:
        subject = event["adapter"] or ""
        if event["version"]:
            subject += f"@{event['version']}"
        print(f"  {event['actor']:<8} {event['action']:<24} {subject}")


def run_demo(
    workdir: Path,
    *,
    admin_token: str | None = None,
    resolver_token: str | None = None,
    replicas: int = 1,
    private_artifacts: bool = False,
) -> list[DemoAnswer]:
    """Run the whole demo under ``workdir``; returns the answers in order.

    ``admin_token`` and ``resolver_token`` are the control plane's bootstrap secrets; each one
    not given is generated for this run. ``replicas`` vLLM servers run behind the control plane
    (routed with adapter affinity); with ``private_artifacts`` each downloads the versions it
    serves into its own cache instead of reading the control plane's artifact directory
    (:class:`EmbeddedStack`; needs root and ``unshare`` on Linux).
    """
    import openai

    admin_token = admin_token or new_secret()
    resolver_token = resolver_token or new_secret()
    fleet = build_fleet(workdir / "fleet")
    stack_dir = workdir / "stack"
    shutil.rmtree(stack_dir, ignore_errors=True)
    answers: list[DemoAnswer] = []
    print("Starting the control plane and vLLM (CPU); vLLM takes about a minute...", flush=True)
    # No background warm-ups (the demo warms up on demand, at the end): the demo compares
    # outputs, and background requests batched with its own could blur them (tests/conftest.py)
    with EmbeddedStack(
        workdir=stack_dir,
        model_dir=fleet.model_dir,
        warmup=False,
        admin_token=admin_token,
        resolver_token=resolver_token,
        vllm_replicas=replicas,
        private_artifacts=private_artifacts,
    ) as stack:
        print(f"  control plane: {stack.control_plane_url}   vLLM: {', '.join(stack.vllm_urls)}")
        print(f"  logs: {stack.log_dir}")
        admin = ControlPlaneClient(stack.control_plane_url, timeout_s=60.0, token=admin_token)
        api_key = _access(admin, stack.control_plane_url)
        client = openai.OpenAI(
            base_url=f"{stack.control_plane_url}/v1", api_key=api_key, max_retries=0
        )
        with client:
            print("\nRegistering adapters:")
            for name, version, domains in (
                ("python-lora", "1.0.0", ["python", "testing"]),
                ("python-lora", "1.1.0", ["python", "testing"]),
                ("math-lora", "1.0.0", ["math", "proofs"]),
                ("docs-lora", "1.0.0", ["documentation", "markdown"]),
                ("sql-lora", "1.0.0", ["sql"]),
            ):
                source = fleet.adapters[f"{name}-{version}"]
                info = admin.register(name, version, str(source), domains=domains)
                state = "active" if info.get("is_active") else "inactive"
                print(
                    f"  {name}@{version}: {info.get('variant', 'lora')}, "
                    f"lora_int_id={info.get('lora_int_id')} ({state})"
                )

            _wait_for_probes(admin, ["python-lora@1.0.0", "math-lora@1.0.0"])
            print("\nRequests through the control plane (openai client):")
            print(
                "  (the tiny model and its adapters have random weights, so the replies are"
                " gibberish;\n   what matters is which model answered, and that each adapter"
                " changes the output)"
            )
            for step, model, stream in (
                ("base model", str(fleet.model_dir), False),
                ("specialist (active version)", "python-lora", False),
                ("pinned version", "python-lora@1.1.0", False),
                ("other specialist, streaming", "math-lora", True),
            ):
                answer = _ask(client, model, stream=stream)
                answers.append(answer)
                _show(step, answer)

            print("\nPromote python-lora 1.1.0:")
            admin.promote("python-lora", "1.1.0")
            answer = _ask(client, "python-lora")
            answers.append(answer)
            _show("specialist after promote", answer)

            print("\nRoll back python-lora:")
            admin.rollback("python-lora")
            answer = _ask(client, "python-lora")
            answers.append(answer)
            _show("specialist after rollback", answer)

            print('\nmodel="auto": the dispatcher picks the specialist for each task:')
            for step, objective, refs in AUTO_TASKS:
                answer = _ask_auto(client, objective, refs)
                answers.append(answer)
                _show(step, answer)
            answer = _ask(client, "docs-lora")
            answers.append(answer)
            _show("DoRA specialist (unmerged)", answer)
            answer = _ask(client, "sql-lora")
            answers.append(answer)
            _show("AdaLoRA specialist (converted)", answer)
            decision = admin.dispatch("Prove that the sum of two even numbers is even")
            print(
                f"  dry run (POST /v1/dispatch): {decision['specialist']} by {decision['tier']},"
                f" scores {decision['scores']}"
            )
            _operations(admin, stack.control_plane_url)
            _audit(admin)
        print("\nShutting down...", flush=True)
    print("Done: both servers stopped.")
    return answers
