"""Registration from remote sources: a real HTTPS server (test CA), a real FTP server through
fsspec, and the admin API over ASGI against a real SQLite file.

Every refusal answers a 422 problem with a stable code, quotes no URL, and leaves the registry as
it was: no row, no published file, no staging directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import ssl
import struct
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from registry.app import create_app
from registry.db.migrate import upgrade_to_head
from registry.errors import InvalidRequestError
from registry.services.remote_sources import RemoteSourcePolicy, redact
from registry.settings import ControlPlaneSettings
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter
from tests.support.file_servers import (
    FTP_PASSWORD,
    FTP_USER,
    FileServer,
    LocalCA,
    Route,
    ftp_server,
    http_server,
    make_ca,
    serve_adapter,
)

PROBLEM_JSON = "application/problem+json"
WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"
MAX_FILE_BYTES = 256 * 1024
Settings = Callable[..., ControlPlaneSettings]


@pytest.fixture
def ca(tmp_path: Path) -> LocalCA:
    return make_ca(tmp_path)


@pytest.fixture
def https(ca: LocalCA) -> Iterator[FileServer]:
    with http_server(ca) as server:
        yield server


@pytest.fixture
def adapter(tmp_path: Path) -> Path:
    """A real adapter directory (outside every source root: served, never read locally)."""
    return write_adapter(tmp_path / "published" / "py")


@pytest.fixture
def make_settings(tmp_path: Path, ca: LocalCA) -> Settings:
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    upgrade_to_head(url)

    def make(prefixes: list[str], **overrides: Any) -> ControlPlaneSettings:
        options: dict[str, Any] = {
            "database_url": url,
            "artifact_dir": tmp_path / "artifacts",
            "base_model": DEFAULT_BASE_MODEL,
            "source_roots": [tmp_path / "published"],
            "source_url_prefixes": prefixes,
            "source_ca_bundle": ca.bundle,
            "source_max_file_bytes": MAX_FILE_BYTES,
            "source_max_artifact_bytes": MAX_FILE_BYTES + 4096,
            "dispatch_embeddings": False,
            "health_checks": False,
            "warmup": False,
            **overrides,
        }
        return ControlPlaneSettings(**options)

    return make


@pytest.fixture
def app_client(
    make_settings: Settings,
) -> Callable[..., contextlib.AbstractAsyncContextManager[httpx.AsyncClient]]:
    return lambda prefixes, **overrides: _client(make_settings(prefixes, **overrides))


@contextlib.asynccontextmanager
async def _client(settings: ControlPlaneSettings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://registry") as http:
            yield http


async def _register(
    client: httpx.AsyncClient, name: str, source: str, version: str = "1.0.0"
) -> httpx.Response:
    body = {"version": version, "source": source}
    return await client.post(f"/admin/v1/adapters/{name}/versions", json=body)


def _problem(response: httpx.Response, code: str, status: int = 422) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM_JSON
    problem: dict[str, Any] = response.json()
    assert problem["code"] == code, problem
    assert "://" not in problem["detail"]  # never the URL
    return problem


def _leftovers(artifacts: Path) -> list[str]:
    """Everything in the store but its (empty) staging and trash directories."""
    left = sorted(str(p.relative_to(artifacts)) for p in artifacts.rglob("*"))
    return [p for p in left if p not in (".staging", ".trash")]


async def _nothing_registered(client: httpx.AsyncClient, artifacts: Path, name: str) -> None:
    assert (await client.get(f"/admin/v1/adapters/{name}")).status_code == 404
    assert await asyncio.to_thread(_leftovers, artifacts) == []


# ------------------------------------------------------------------ URL checks (no network)


def test_redact_drops_credentials_query_and_fragment() -> None:
    assert redact("ftp://user:pw@host:21/a/b?x=1#f") == "ftp://host:21/a/b"
    assert redact("https://host/a") == "https://host/a"


PREFIX = "https://models.example.com/adapters"


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("https://models.example.com/adapters/py", None),
        ("HTTPS://Models.Example.com/adapters/py", None),
        ("https://models.example.com/adapters", None),
        ("https://models.example.com/adaptersX/py", "source_url_not_allowed"),
        ("https://models.example.com.evil.net/adapters/py", "source_url_not_allowed"),
        ("https://models.example.com@evil.net/adapters/py", "source_url_invalid"),
        ("https://other.example.com/adapters/py", "source_url_not_allowed"),
        ("http://models.example.com/adapters/py", "source_url_not_allowed"),
        ("https://models.example.com/adapters/../secrets", "source_url_invalid"),
        ("https://models.example.com/adapters/%2e%2e/secrets", "source_url_invalid"),
        ("https://models.example.com/adapters/a%2Fb", "source_url_invalid"),
        ("https://models.example.com/adapters/py?x=1", "source_url_invalid"),
        ("https://models.example.com/adapters/py#f", "source_url_invalid"),
        ("https://models.example.com/adapters/p y", "source_url_invalid"),
        ("https://models.example.com/adapters/py\\..", "source_url_invalid"),
        ("https://user:pw@models.example.com/adapters/py", "source_url_invalid"),
        ("https://models.example.com:99999/adapters/py", "source_url_invalid"),
        ("ftp://models.example.com/adapters/py", "source_url_not_allowed"),
        (
            "ftp://models.example.com/adapters/x::https://models.example.com/adapters/py",
            "source_url_invalid",
        ),
    ],
)
def test_url_checks(url: str, code: str | None) -> None:
    policy = RemoteSourcePolicy([PREFIX])
    assert policy.handles(url)
    if code is None:
        assert policy.check(url).uri == redact(url)
        return
    with pytest.raises(InvalidRequestError) as caught:
        policy.check(url)
    assert caught.value.code == code
    assert "example" not in caught.value.detail


def test_no_prefix_accepts_no_url() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        RemoteSourcePolicy([]).check("https://models.example.com/adapters/py")
    assert caught.value.code == "remote_sources_disabled"
    assert "HI_MOE_LORA_SOURCE_URL_PREFIXES" in caught.value.detail


def test_plain_http_needs_a_prefix_that_names_it() -> None:
    policy = RemoteSourcePolicy([PREFIX, "http://mirror.internal/adapters/"])
    assert policy.check("http://mirror.internal/adapters/py").uri
    with pytest.raises(InvalidRequestError) as caught:
        policy.check("http://models.example.com/adapters/py")
    assert "plain HTTP" in caught.value.detail


@pytest.mark.parametrize(
    "prefix",
    [
        "file:///srv/adapters",
        "memory://adapters",
        "https://host/a?x=1",
        "https://user:pw@host/a",
        "https:///no-host",
        "gopher://host/a",
    ],
)
def test_unusable_prefixes_fail_at_start(prefix: str) -> None:
    with pytest.raises(ValueError, match=r"HI_MOE_LORA_SOURCE_URL_PREFIXES|fsspec"):
        RemoteSourcePolicy([prefix])


@pytest.mark.parametrize("content", [None, b"not a certificate"], ids=["missing", "garbage"])
def test_an_unreadable_ca_bundle_fails_at_start(tmp_path: Path, content: bytes | None) -> None:
    """The TLS context is made on first use, except the CA bundle: it is read at once, so a
    bad one stops the start instead of failing the first HTTPS registration."""
    bundle = tmp_path / "ca.pem"
    if content is not None:
        bundle.write_bytes(content)
    with pytest.raises((OSError, ssl.SSLError)):
        RemoteSourcePolicy([PREFIX], ca_bundle=bundle)


def test_unknown_protocols_are_not_remote_sources() -> None:
    policy = RemoteSourcePolicy([])
    assert not policy.handles("gopher://host/a")
    assert not policy.handles("file:///srv/a")


# ------------------------------------------------------------------ https, through the API


async def test_https_source_registers_the_same_adapter_as_a_local_copy(
    app_client: Any, https: FileServer, adapter: Path, tmp_path: Path
) -> None:
    url = serve_adapter(https, "/adapters/py", adapter)
    async with app_client([https.base_url + "/adapters/"]) as client:
        remote = await _register(client, "py-remote", url)
        assert remote.status_code == 201, remote.text
        local = await _register(client, "py-local", str(adapter))
        assert local.status_code == 201, local.text
    got, want = remote.json(), local.json()
    assert got["sha256"] == want["sha256"]
    assert got["source_uri"] == url
    published = Path(got["local_path"])
    for name in (CONFIG, WEIGHTS):
        assert (published / name).read_bytes() == (adapter / name).read_bytes()
    assert sorted(os.listdir(published)) == [CONFIG, WEIGHTS]
    assert not list((tmp_path / "artifacts" / ".staging").iterdir())
    # only the two files were asked for, once each
    assert sorted(https.requests) == [f"GET /adapters/py/{CONFIG}", f"GET /adapters/py/{WEIGHTS}"]


async def test_the_ca_can_come_from_ssl_cert_file(
    make_settings: Settings,
    https: FileServer,
    adapter: Path,
    ca: LocalCA,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = serve_adapter(https, "/adapters/py", adapter)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.bundle))
    settings = make_settings([https.base_url + "/adapters/"], source_ca_bundle=None)
    async with _client(settings) as client:
        assert (await _register(client, "py", url)).status_code == 201


async def test_an_untrusted_certificate_is_refused(
    make_settings: Settings, https: FileServer, adapter: Path, tmp_path: Path
) -> None:
    url = serve_adapter(https, "/adapters/py", adapter)
    settings = make_settings([https.base_url + "/adapters/"], source_ca_bundle=None)
    async with _client(settings) as client:
        _problem(await _register(client, "py", url), "source_unreachable")
        await _nothing_registered(client, tmp_path / "artifacts", "py")


async def test_redirects_are_followed_only_within_the_prefixes(
    app_client: Any, https: FileServer, adapter: Path, tmp_path: Path
) -> None:
    serve_adapter(https, "/adapters/real", adapter)
    serve_adapter(https, "/private/py", adapter)
    for name in (CONFIG, WEIGHTS):
        https.routes[f"/adapters/moved/{name}"] = Route(
            status=302, mode="redirect", location=f"/adapters/real/{name}"
        )
        https.routes[f"/adapters/leak/{name}"] = Route(
            status=301, mode="redirect", location=f"{https.base_url}/private/py/{name}"
        )
        https.routes[f"/adapters/loop/{name}"] = Route(
            status=307, mode="redirect", location=f"/adapters/loop/{name}"
        )
    async with app_client([https.base_url + "/adapters/"]) as client:
        moved = await _register(client, "moved", https.base_url + "/adapters/moved")
        assert moved.status_code == 201, moved.text
        _problem(
            await _register(client, "leak", https.base_url + "/adapters/leak"),
            "source_redirect_not_allowed",
        )
        _problem(
            await _register(client, "loop", https.base_url + "/adapters/loop"),
            "source_redirect_not_allowed",
        )
        for name in ("leak", "loop"):
            await _nothing_registered(client, tmp_path / "artifacts" / name, name)
    assert not any(r.startswith("GET /private/") for r in https.requests)


async def test_plain_http_only_through_an_http_prefix(
    make_settings: Settings, adapter: Path
) -> None:
    with http_server(None) as plain:
        url = serve_adapter(plain, "/adapters/py", adapter)
        https_only = make_settings([url.replace("http://", "https://", 1).rsplit("/", 1)[0]])
        async with _client(https_only) as client:
            _problem(await _register(client, "py", url), "source_url_not_allowed")
        assert plain.requests == []
        async with _client(make_settings([plain.base_url + "/adapters/"])) as client:
            assert (await _register(client, "py", url)).status_code == 201


@pytest.mark.parametrize(
    "mode", ["declared_huge", "understated", "endless"], ids=["declared", "lying", "endless"]
)
async def test_oversized_answers_are_cut_off(
    app_client: Any, https: FileServer, adapter: Path, tmp_path: Path, mode: Any
) -> None:
    serve_adapter(https, "/adapters/big", adapter)
    https.routes[f"/adapters/big/{WEIGHTS}"] = Route(body=b"\0" * 1024, mode=mode)
    async with app_client([https.base_url + "/adapters/"]) as client:
        _problem(
            await _register(client, "big", https.base_url + "/adapters/big"), "source_too_large"
        )
        await _nothing_registered(client, tmp_path / "artifacts", "big")


async def test_a_server_that_drips_is_cut_off_at_the_deadline(
    app_client: Any, https: FileServer, adapter: Path, tmp_path: Path
) -> None:
    serve_adapter(https, "/adapters/slow", adapter)
    https.routes[f"/adapters/slow/{WEIGHTS}"] = Route(mode="drip")
    prefixes = [https.base_url + "/adapters/"]
    async with app_client(prefixes, source_fetch_timeout_s=1.0) as client:
        response = await _register(client, "slow", https.base_url + "/adapters/slow")
        _problem(response, "source_timeout")
        await _nothing_registered(client, tmp_path / "artifacts", "slow")


async def test_missing_files_and_directories(
    app_client: Any, https: FileServer, adapter: Path, tmp_path: Path
) -> None:
    https.routes[f"/adapters/half/{CONFIG}"] = Route((adapter / CONFIG).read_bytes())
    async with app_client([https.base_url + "/adapters/"]) as client:
        _problem(
            await _register(client, "half", https.base_url + "/adapters/half"), "missing_weights"
        )
        _problem(
            await _register(client, "none", https.base_url + "/adapters/none"), "source_not_found"
        )
        for name in ("half", "none"):
            await _nothing_registered(client, tmp_path / "artifacts", name)


async def test_pickle_only_is_refused_without_downloading_it(
    app_client: Any, https: FileServer, adapter: Path, tmp_path: Path
) -> None:
    https.routes[f"/adapters/pkl/{CONFIG}"] = Route((adapter / CONFIG).read_bytes())
    https.routes["/adapters/pkl/adapter_model.bin"] = Route(b"\x80\x04 pickled")
    async with app_client([https.base_url + "/adapters/"]) as client:
        _problem(await _register(client, "pkl", https.base_url + "/adapters/pkl"), "pickle_weights")
        await _nothing_registered(client, tmp_path / "artifacts", "pkl")
    assert "GET /adapters/pkl/adapter_model.bin" not in https.requests


def _with_nan(directory: Path) -> bytes:
    data = bytearray((directory / WEIGHTS).read_bytes())
    start = 8 + struct.unpack("<Q", data[:8])[0]
    data[start : start + 4] = struct.pack("<f", math.nan)
    return bytes(data)


async def test_invalid_adapters_are_refused_like_local_ones(
    app_client: Any, https: FileServer, adapter: Path, tmp_path: Path
) -> None:
    serve_adapter(https, "/adapters/nan", adapter)
    https.routes[f"/adapters/nan/{WEIGHTS}"] = Route(_with_nan(adapter))
    serve_adapter(https, "/adapters/cfg", adapter)
    https.routes[f"/adapters/cfg/{CONFIG}"] = Route(b"{not json")
    https.routes["/adapters/forbidden/adapter_config.json"] = Route(b"{}", status=403)
    async with app_client([https.base_url + "/adapters/"]) as client:
        nan = _problem(
            await _register(client, "nan", https.base_url + "/adapters/nan"), "non_finite_weights"
        )
        assert nan["title"] == "Invalid adapter"
        _problem(
            await _register(client, "cfg", https.base_url + "/adapters/cfg"), "malformed_config"
        )
        _problem(
            await _register(client, "forbidden", https.base_url + "/adapters/forbidden"),
            "source_unreadable",
        )
        for name in ("nan", "cfg", "forbidden"):
            await _nothing_registered(client, tmp_path / "artifacts", name)


async def test_no_remote_source_without_prefixes(
    app_client: Any, https: FileServer, adapter: Path
) -> None:
    url = serve_adapter(https, "/adapters/py", adapter)
    async with app_client([]) as client:
        _problem(await _register(client, "py", url), "remote_sources_disabled")
    assert https.requests == []


# ------------------------------------------------------------------ fsspec: ftp://


async def test_ftp_source_through_fsspec(
    app_client: Any, adapter: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "ftp"
    write_adapter(root / "adapters" / "py")
    (root / "adapters" / "big").mkdir()
    (root / "adapters" / "big" / CONFIG).write_bytes((adapter / CONFIG).read_bytes())
    (root / "adapters" / "big" / WEIGHTS).write_bytes(b"\0" * (MAX_FILE_BYTES + 1))
    with ftp_server(root) as base:
        host = base.removeprefix("ftp://")
        async with app_client([base + "/adapters/"]) as client:
            caplog.set_level(logging.DEBUG)
            anonymous = await _register(client, "ftp-anon", base + "/adapters/py")
            assert anonymous.status_code == 201, anonymous.text
            secret = f"ftp://{FTP_USER}:{FTP_PASSWORD}@{host}/adapters/py"
            user = await _register(client, "ftp-user", secret)
            assert user.status_code == 201, user.text
            local = await _register(client, "ftp-local", str(adapter))
            _problem(await _register(client, "ftp-big", base + "/adapters/big"), "source_too_large")
            _problem(
                await _register(client, "ftp-none", base + "/adapters/none"), "source_not_found"
            )
            _problem(
                await _register(client, "ftp-out", base + "/elsewhere/py"), "source_url_not_allowed"
            )
            for name in ("ftp-big", "ftp-none", "ftp-out"):
                assert (await client.get(f"/admin/v1/adapters/{name}")).status_code == 404
    assert anonymous.json()["sha256"] == local.json()["sha256"] == user.json()["sha256"]
    assert user.json()["source_uri"] == base + "/adapters/py"  # no credentials recorded
    assert FTP_PASSWORD not in caplog.text
    assert FTP_PASSWORD not in json.dumps(user.json())
    assert not list((tmp_path / "artifacts" / ".staging").iterdir())
