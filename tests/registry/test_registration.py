"""Registration answered as NDJSON (``Accept: application/x-ndjson``): progress lines, then the
outcome; refusals known before the first byte stay plain problems. Real app over ASGI, real
SQLite/PostgreSQL, a real HTTPS server for a remote source."""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hi_moe_lora.control_api import paths
from registry.settings import ControlPlaneSettings
from tests.registry.conftest import AdapterFactory
from tests.support.file_servers import FileServer, LocalCA, http_server, make_ca, serve_adapter

WEIGHTS = "adapter_model.safetensors"
NDJSON = {"Accept": paths.NDJSON}


@pytest.fixture
def ca(tmp_path: Path) -> LocalCA:
    return make_ca(tmp_path)


@pytest.fixture
def https(ca: LocalCA) -> Iterator[FileServer]:
    with http_server(ca) as server:
        yield server


@pytest.fixture
def settings(
    settings: ControlPlaneSettings, https: FileServer, ca: LocalCA
) -> ControlPlaneSettings:
    return settings.model_copy(
        update={
            "source_url_prefixes": [https.base_url + "/adapters/"],
            "source_ca_bundle": ca.bundle,
        }
    )


async def _stream(
    client: httpx.AsyncClient, name: str, source: Path | str, version: str = "1.0.0"
) -> httpx.Response:
    body = {"version": version, "source": str(source)}
    return await client.post(f"/admin/v1/adapters/{name}/versions", json=body, headers=NDJSON)


def _events(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(paths.NDJSON)
    lines = response.text.splitlines()
    assert lines
    return [json.loads(line) for line in lines]


def _check_progress(events: list[dict[str, Any]], total: int) -> None:
    progress = events[:-1]
    assert progress
    assert all(e["event"] == "progress" and e["total"] == total for e in progress)
    sent = [e["bytes"] for e in progress]
    assert sent == sorted(sent)
    assert sent[0] == 0
    assert sent[-1] == total


def _size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir())


async def test_local_registration_streams_progress_then_the_version(
    client: httpx.AsyncClient, make_adapter: AdapterFactory
) -> None:
    source = make_adapter("py")
    events = _events(await _stream(client, "py-lora", source))
    _check_progress(events, _size(source))
    assert events[-1]["event"] == "registered"
    stored = (await client.get("/admin/v1/adapters/py-lora/versions/1.0.0")).json()
    assert events[-1]["version"] == stored  # the same JSON as the 201 answer's
    plain = await client.post(
        "/admin/v1/adapters/py-lora/versions", json={"version": "1.1.0", "source": str(source)}
    )
    assert plain.status_code == 201
    assert set(plain.json()) == set(stored)


async def test_remote_registration_streams_the_bytes_fetched(
    client: httpx.AsyncClient, https: FileServer, make_adapter: AdapterFactory
) -> None:
    source = make_adapter("remote")
    url = serve_adapter(https, "/adapters/remote", source)
    events = _events(await _stream(client, "remote", url))
    _check_progress(events, _size(source))
    assert events[-1]["event"] == "registered"
    assert events[-1]["version"]["source_uri"] == url


async def test_refusals_before_the_first_byte_are_plain_problems(
    client: httpx.AsyncClient, https: FileServer, make_adapter: AdapterFactory
) -> None:
    source = make_adapter("py")
    cases: list[tuple[str, Path | str, str, int, str]] = [
        ("Bad_Name", source, "1.0.0", 422, "invalid_name"),
        ("py", "https://elsewhere.invalid/adapters/py", "2.0.0", 422, "source_url_not_allowed"),
        ("py", https.base_url + "/adapters/none", "2.0.0", 422, "source_not_found"),
        ("py", source, "1.0.0", 409, "version_exists"),
    ]
    assert (await _stream(client, "py", source)).status_code == 200
    for name, src, version, status, code in cases:
        response = await _stream(client, name, src, version)
        assert response.status_code == status, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["code"] == code


async def test_a_refusal_after_bytes_is_the_last_line(
    client: httpx.AsyncClient, make_adapter: AdapterFactory, artifact_dir: Path
) -> None:
    source = make_adapter("nan")
    data = bytearray((source / WEIGHTS).read_bytes())
    start = 8 + struct.unpack("<Q", data[:8])[0]
    data[start : start + 4] = struct.pack("<f", math.nan)
    (source / WEIGHTS).write_bytes(bytes(data))
    events = _events(await _stream(client, "nan", source))
    _check_progress(events, _size(source))
    problem = events[-1]["problem"]
    assert events[-1]["event"] == "error"
    assert problem["code"] == "non_finite_weights"
    assert problem["status"] == 422
    assert problem["title"] == "Invalid adapter"
    assert problem["type"].endswith("/non_finite_weights")
    assert (await client.get("/admin/v1/adapters/nan")).status_code == 404
    assert sorted(os.listdir(artifact_dir)) == [".staging"]
    assert os.listdir(artifact_dir / ".staging") == []


async def test_without_the_header_the_answer_is_unchanged(
    client: httpx.AsyncClient, make_adapter: AdapterFactory
) -> None:
    source = make_adapter("py")
    body = {"version": "1.0.0", "source": str(source)}
    response = await client.post("/admin/v1/adapters/py/versions", json=body)
    assert response.status_code == 201
    assert response.headers["content-type"] == "application/json"
    assert response.headers["location"].endswith("/adapters/py/versions/1.0.0")
