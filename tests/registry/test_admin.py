"""The admin API over real HTTP (ASGI) against real SQLite files and PostgreSQL schemas."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from hi_moe_lora.adapters.checksum import adapter_sha256
from tests.registry.conftest import MAX_RANK, AdapterFactory

PROBLEM_JSON = "application/problem+json"


def _files(root: Path) -> list[str]:
    """Everything in the artifact store but the (empty) staging and trash areas."""
    if not root.exists():
        return []
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if not p.relative_to(root).parts[0].startswith(".")
    )


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _exists(path: str) -> bool:
    return Path(path).exists()


async def _register(
    client: httpx.AsyncClient, name: str, version: str, source: Path | str, **extra: Any
) -> httpx.Response:
    body = {"version": version, "source": str(source), **extra}
    return await client.post(f"/admin/v1/adapters/{name}/versions", json=body)


def _problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM_JSON
    problem: dict[str, Any] = response.json()
    assert problem["status"] == status
    assert problem["code"] == code
    assert problem["title"]
    assert problem["detail"]
    assert problem["type"]
    return problem


async def test_register_happy_path(
    client: httpx.AsyncClient, make_adapter: AdapterFactory, artifact_dir: Path
) -> None:
    source = make_adapter("py", rank=8, alpha=16)
    response = await _register(
        client, "python-lora", "1.0.0", source.as_uri(), domains=["python", "code"]
    )
    assert response.status_code == 201, response.text
    assert response.headers["location"] == "/admin/v1/adapters/python-lora/versions/1.0.0"
    body = response.json()
    assert body["served_name"] == "python-lora@1.0.0"
    assert body["lora_int_id"] == 1
    assert body["is_active"] is True
    assert body["status"] == "active"
    assert body["traffic_share"] == 1.0
    assert (body["rank"], body["alpha"], body["variant"]) == (8, 16.0, "lora")
    assert body["target_modules"] == ["q_proj", "v_proj"]
    assert body["domains"] == ["python", "code"]
    assert body["previous_version"] is None
    assert body["sha256"] == adapter_sha256(source)
    local = Path(body["local_path"])
    assert local.is_absolute()
    assert local == (artifact_dir / "python-lora" / "1.0.0").resolve()
    assert _names(local) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    assert adapter_sha256(local) == body["sha256"]

    second = await _register(client, "python-lora", "1.1.0", make_adapter("py2", seed=1))
    assert second.status_code == 201
    assert second.json()["lora_int_id"] == 2
    assert second.json()["is_active"] is False
    assert second.json()["previous_version"] == "1.0.0"

    listing = (await client.get("/admin/v1/adapters")).json()["adapters"]
    assert [(a["name"], a["active_version"]) for a in listing] == [("python-lora", "1.0.0")]
    adapter = (await client.get("/admin/v1/adapters/python-lora")).json()
    assert [v["version"] for v in adapter["versions"]] == ["1.0.0", "1.1.0"]
    version = (await client.get("/admin/v1/adapters/python-lora/versions/1.1.0")).json()
    assert version["lora_int_id"] == 2

    resolved = (await client.get("/admin/v1/resolve/python-lora")).json()
    assert resolved == {
        "name": "python-lora",
        "version": "1.0.0",
        "served_name": "python-lora@1.0.0",
        "lora_int_id": 1,
        "local_path": str(local),
        "sha256": body["sha256"],
        "rank": 8,
        "alpha": 16.0,
        "variant": "lora",
        "base_model": "/models/tiny-llama",
        "files": [
            {"name": name, "size": (local / name).stat().st_size}
            for name in ("adapter_config.json", "adapter_model.safetensors")
        ],
    }
    pinned = (await client.get("/admin/v1/resolve/python-lora@1.1.0")).json()
    assert pinned["lora_int_id"] == 2


async def test_dora_adapter_is_registered_as_dora(
    client: httpx.AsyncClient, make_adapter: AdapterFactory
) -> None:
    response = await _register(client, "dora-lora", "0.1.0-rc.1+b7", make_adapter(use_dora=True))
    assert response.status_code == 201, response.text
    assert response.json()["variant"] == "dora"


async def test_adalora_adapter_is_converted_at_registration(
    client: httpx.AsyncClient, make_adapter: AdapterFactory, artifact_dir: Path
) -> None:
    response = await _register(client, "ada-lora", "1.0.0", make_adapter(adalora=True, rank=4))
    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["variant"], body["rank"]) == ("adalora", 4)
    stored = artifact_dir / "ada-lora" / "1.0.0"
    assert json.loads((stored / "adapter_config.json").read_text())["peft_type"] == "LORA"
    assert json.loads((stored / "original" / "adapter_config.json").read_text())["peft_type"] == (
        "ADALORA"
    )
    assert json.loads((stored / "adalora_conversion.json").read_text())["rank"] == 4


def _break_config(directory: Path) -> None:
    (directory / "adapter_config.json").write_text("{ not json")


def _drop_config(directory: Path) -> None:
    (directory / "adapter_config.json").unlink()


def _truncate_weights(directory: Path) -> None:
    weights = directory / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])


def _garbage_header(directory: Path) -> None:
    weights = directory / "adapter_model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:8] + b"\x00garbage!" + data[17:])


def _drop_weights(directory: Path) -> None:
    (directory / "adapter_model.safetensors").unlink()


def _other_peft_type(directory: Path) -> None:
    config = json.loads((directory / "adapter_config.json").read_text())
    config["peft_type"] = "PREFIX_TUNING"
    (directory / "adapter_config.json").write_text(json.dumps(config))


def _dora_without_magnitudes(directory: Path) -> None:
    config = json.loads((directory / "adapter_config.json").read_text())
    config["use_dora"] = True  # but the weights carry no lora_magnitude_vector
    (directory / "adapter_config.json").write_text(json.dumps(config))


BAD_ADAPTERS: dict[str, tuple[Callable[[Path], None] | None, dict[str, Any]]] = {
    "missing_config": (_drop_config, {}),
    "malformed_config": (_break_config, {}),
    "corrupt_weights-truncated": (_truncate_weights, {}),
    "corrupt_weights-garbage": (_garbage_header, {}),
    "missing_weights": (_drop_weights, {}),
    "unsupported_peft_type": (_other_peft_type, {}),
    "rank_too_high": (None, {"rank": MAX_RANK * 2}),
    "base_model_mismatch": (None, {"base_model": "/models/some-other-model"}),
    "unsupported_variant": (_dora_without_magnitudes, {}),
    "unsupported_variant-adalora-conv1d": (
        None,
        {"adalora": True, "config": {"fan_in_fan_out": True}},
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_ADAPTERS))
async def test_bad_adapters_leave_nothing_behind(
    client: httpx.AsyncClient, make_adapter: AdapterFactory, artifact_dir: Path, case: str
) -> None:
    good = await _register(client, "keep-lora", "1.0.0", make_adapter("good"))
    assert good.status_code == 201
    before_db = (await client.get("/admin/v1/adapters")).json()
    before_files = _files(artifact_dir)

    breaker, options = BAD_ADAPTERS[case]
    source = make_adapter("bad", **options)
    if breaker is not None:
        breaker(source)
    response = await _register(client, "bad-lora", "1.0.0", source)
    problem = _problem(response, 422, case.split("-")[0])
    assert ".staging" not in problem["detail"]

    assert (await client.get("/admin/v1/adapters")).json() == before_db
    assert _files(artifact_dir) == before_files
    assert _names(artifact_dir / ".staging") == []
    # the failed attempt consumed no id
    after = await _register(client, "next-lora", "1.0.0", make_adapter("next"))
    assert after.json()["lora_int_id"] == 2


@pytest.mark.parametrize(
    ("name", "version", "status", "code"),
    [
        ("Bad_Name", "1.0.0", 422, "invalid_name"),
        ("-leading-dash", "1.0.0", 422, "invalid_name"),
        ("x" * 65, "1.0.0", 422, "invalid_name"),
        ("a@b", "1.0.0", 422, "invalid_name"),
        ("good-lora", "1.0", 422, "invalid_version"),
        ("good-lora", "v1.0.0", 422, "invalid_version"),
        ("good-lora", "01.0.0", 422, "invalid_version"),
        ("good-lora", "1.0.0-", 422, "invalid_version"),
    ],
)
async def test_bad_names_and_versions(
    client: httpx.AsyncClient,
    make_adapter: AdapterFactory,
    artifact_dir: Path,
    name: str,
    version: str,
    status: int,
    code: str,
) -> None:
    response = await _register(client, name, version, make_adapter())
    _problem(response, status, code)
    assert (await client.get("/admin/v1/adapters")).json() == {"adapters": []}
    assert _files(artifact_dir) == []


async def test_duplicate_version_is_a_conflict(
    client: httpx.AsyncClient, make_adapter: AdapterFactory, artifact_dir: Path
) -> None:
    first = await _register(client, "dup-lora", "1.0.0", make_adapter("one"))
    assert first.status_code == 201
    before_files = _files(artifact_dir)
    original = (await client.get("/admin/v1/adapters/dup-lora")).json()
    response = await _register(client, "dup-lora", "1.0.0", make_adapter("two", seed=5))
    _problem(response, 409, "version_exists")
    assert (await client.get("/admin/v1/adapters/dup-lora")).json() == original
    assert _files(artifact_dir) == before_files
    assert adapter_sha256(Path(first.json()["local_path"])) == first.json()["sha256"]


async def test_bad_sources(client: httpx.AsyncClient, source_root: Path) -> None:
    _problem(
        await _register(client, "a-lora", "1.0.0", source_root / "missing"),
        422,
        "source_not_found",
    )
    _problem(
        await _register(client, "a-lora", "1.0.0", "s3://bucket/key"), 422, "unsupported_source"
    )


async def test_request_validation_is_problem_json(client: httpx.AsyncClient) -> None:
    response = await client.post("/admin/v1/adapters/a-lora/versions", json={"version": "1.0.0"})
    problem = _problem(response, 422, "request_validation")
    assert "source" in problem["detail"]
    _problem(await client.get("/admin/v1/nothing-here"), 404, "not_found")


async def test_unknown_names_are_404(client: httpx.AsyncClient) -> None:
    _problem(await client.get("/admin/v1/resolve/ghost-lora"), 404, "adapter_not_found")
    _problem(await client.get("/admin/v1/resolve/ghost-lora@1.0.0"), 404, "adapter_not_found")
    _problem(await client.get("/admin/v1/resolve/Not%20a%20name"), 404, "adapter_not_found")
    _problem(await client.get("/admin/v1/adapters/ghost-lora"), 404, "adapter_not_found")
    _problem(
        await client.post("/admin/v1/adapters/ghost-lora/versions/1.0.0/promote"),
        404,
        "adapter_not_found",
    )


async def test_promote_rollback_chain(
    client: httpx.AsyncClient, make_adapter: AdapterFactory
) -> None:
    for index, version in enumerate(["1.0.0", "1.1.0", "1.2.0"]):
        response = await _register(client, "chain-lora", version, make_adapter(version, seed=index))
        assert response.status_code == 201

    async def active() -> str:
        return str((await client.get("/admin/v1/resolve/chain-lora")).json()["version"])

    promoted = await client.post("/admin/v1/adapters/chain-lora/versions/1.1.0/promote")
    assert promoted.status_code == 200
    assert promoted.json()["previous_version"] == "1.0.0"
    assert await active() == "1.1.0"
    promoted = await client.post("/admin/v1/adapters/chain-lora/versions/1.2.0/promote")
    assert promoted.json()["previous_version"] == "1.1.0"
    assert await active() == "1.2.0"
    again = await client.post("/admin/v1/adapters/chain-lora/versions/1.2.0/promote")
    assert again.json()["previous_version"] == "1.1.0"  # promoting the active one is a no-op

    versions = (await client.get("/admin/v1/adapters/chain-lora")).json()["versions"]
    assert [v["is_active"] for v in versions] == [False, False, True]

    rolled = await client.post("/admin/v1/adapters/chain-lora/rollback")
    assert rolled.json()["version"] == "1.1.0"
    assert await active() == "1.1.0"
    rolled = await client.post("/admin/v1/adapters/chain-lora/rollback")
    assert rolled.json()["version"] == "1.0.0"
    _problem(
        await client.post("/admin/v1/adapters/chain-lora/rollback"), 409, "no_previous_version"
    )
    assert await active() == "1.0.0"


async def test_delete_keeps_ids_unique(
    client: httpx.AsyncClient, make_adapter: AdapterFactory, artifact_dir: Path
) -> None:
    await _register(client, "del-lora", "1.0.0", make_adapter("a"))
    second = (await _register(client, "del-lora", "2.0.0", make_adapter("b", seed=2))).json()
    _problem(
        await client.delete("/admin/v1/adapters/del-lora/versions/1.0.0"), 409, "version_is_active"
    )
    response = await client.delete("/admin/v1/adapters/del-lora/versions/2.0.0")
    assert response.status_code == 204
    assert not _exists(second["local_path"])
    _problem(
        await client.get("/admin/v1/adapters/del-lora/versions/2.0.0"), 404, "version_not_found"
    )
    again = (await _register(client, "del-lora", "2.0.0", make_adapter("c", seed=3))).json()
    assert again["lora_int_id"] == 3  # id 2 is never handed out again
    assert _exists(again["local_path"])
    _problem(
        await client.delete("/admin/v1/adapters/del-lora/versions/9.9.9"), 404, "version_not_found"
    )


async def test_traffic_split(client: httpx.AsyncClient, make_adapter: AdapterFactory) -> None:
    for index, version in enumerate(["1.0.0", "1.1.0", "1.2.0"]):
        await _register(client, "ab-lora", version, make_adapter(version, seed=index))
    response = await client.put(
        "/admin/v1/adapters/ab-lora/traffic", json={"weights": {"1.1.0": 0.25, "1.2.0": 0.05}}
    )
    assert response.status_code == 200, response.text
    shares = {v["version"]: v["traffic_share"] for v in response.json()["versions"]}
    assert shares == pytest.approx({"1.0.0": 0.7, "1.1.0": 0.25, "1.2.0": 0.05})
    _problem(
        await client.put(
            "/admin/v1/adapters/ab-lora/traffic", json={"weights": {"1.1.0": 0.8, "1.2.0": 0.3}}
        ),
        422,
        "invalid_traffic",
    )
    _problem(
        await client.put("/admin/v1/adapters/ab-lora/traffic", json={"weights": {"1.0.0": 0.5}}),
        422,
        "invalid_traffic",
    )
    _problem(
        await client.put("/admin/v1/adapters/ab-lora/traffic", json={"weights": {"7.0.0": 0.1}}),
        404,
        "version_not_found",
    )
    # a rejected split changes nothing
    versions = (await client.get("/admin/v1/adapters/ab-lora")).json()["versions"]
    assert {v["version"]: v["traffic_weight"] for v in versions} == {
        "1.0.0": 0.0,
        "1.1.0": 0.25,
        "1.2.0": 0.05,
    }
    # promoting a candidate ends its experiment; the other candidate keeps its weight
    await client.post("/admin/v1/adapters/ab-lora/versions/1.1.0/promote")
    versions = (await client.get("/admin/v1/adapters/ab-lora")).json()["versions"]
    assert {v["version"]: v["traffic_share"] for v in versions} == pytest.approx(
        {"1.0.0": 0.0, "1.1.0": 0.95, "1.2.0": 0.05}
    )


async def test_dispatch_hints_replace_the_previous_ones(
    client: httpx.AsyncClient, make_adapter: AdapterFactory
) -> None:
    assert (await _register(client, "hint-lora", "1.0.0", make_adapter("a"))).status_code == 201
    path = "/admin/v1/adapters/hint-lora/dispatch"
    body = {"keywords": ["terraform", " HCL ", "hcl"], "exemplars": ["plan fails with a lock"]}
    answer = await client.put(path, json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["dispatch_keywords"] == ["terraform", "HCL"]  # stripped, de-duplicated
    shown = (await client.get("/admin/v1/adapters/hint-lora")).json()
    assert shown["dispatch_exemplars"] == ["plan fails with a lock"]
    cleared = await client.put(path, json={})
    assert cleared.json()["dispatch_keywords"] == []


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"keywords": ["x"] * 201}, 422, "request_validation"),
        ({"keywords": ["x" * 65]}, 422, "request_validation"),
        ({"keywords": ["  "]}, 422, "invalid_hint"),
        ({"exemplars": "one"}, 422, "request_validation"),
        ({"keywords": [], "domains": []}, 422, "request_validation"),
    ],
)
async def test_bad_dispatch_hints_change_nothing(
    client: httpx.AsyncClient,
    make_adapter: AdapterFactory,
    body: dict[str, Any],
    status: int,
    code: str,
) -> None:
    await _register(client, "hint-lora", "1.0.0", make_adapter("a"))
    path = "/admin/v1/adapters/hint-lora/dispatch"
    await client.put(path, json={"keywords": ["kept"]})
    answer = await client.put(path, json=body)
    assert (answer.status_code, answer.json()["code"]) == (status, code)
    assert answer.headers["content-type"] == PROBLEM_JSON
    shown = (await client.get("/admin/v1/adapters/hint-lora")).json()
    assert shown["dispatch_keywords"] == ["kept"]


async def test_dispatch_hints_of_an_unknown_adapter(client: httpx.AsyncClient) -> None:
    answer = await client.put("/admin/v1/adapters/ghost-lora/dispatch", json={})
    assert (answer.status_code, answer.json()["code"]) == (404, "adapter_not_found")
