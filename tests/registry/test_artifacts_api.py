"""The artifact endpoint on a real app (SQLite, over ASGI): whole files, ranges, HEAD, refusals."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from hi_moe_lora.adapters.checksum import adapter_sha256
from registry.api.admission import AdminAdmission
from registry.api.artifacts import parse_range
from registry.app import create_app
from registry.settings import ControlPlaneSettings
from tests.registry.conftest import AdapterFactory

ADMIN = "hml_artifact-admin-secret-0123456789abcdefghijk"
RESOLVER = "hml_artifact-resolver-secret-0123456789abcdefg"
WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"


async def _registered(http: httpx.AsyncClient, make_adapter: AdapterFactory) -> Path:
    source = make_adapter("art", rank=8, seed=3)
    answer = await http.post(
        "/admin/v1/adapters/art-lora/versions",
        json={"version": "1.0.0", "source": str(source)},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert answer.status_code == 201, answer.text
    return Path(answer.json()["local_path"])


@pytest.fixture
async def closed(settings: ControlPlaneSettings) -> AsyncIterator[httpx.AsyncClient]:
    closed_settings = settings.model_copy(
        update={"admin_token": SecretStr(ADMIN), "resolver_token": SecretStr(RESOLVER)}
    )
    app = create_app(closed_settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://registry") as http:
            yield http


def _auth(secret: str = RESOLVER) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


URL = "/admin/v1/artifacts/art-lora/1.0.0/"


async def test_whole_file_with_length_and_etag(
    closed: httpx.AsyncClient, make_adapter: AdapterFactory
) -> None:
    stored = await _registered(closed, make_adapter)
    for name in (WEIGHTS, CONFIG):
        answer = await closed.get(URL + name, headers=_auth())
        assert answer.status_code == 200
        assert answer.content == (stored / name).read_bytes()
        assert answer.headers["content-length"] == str((stored / name).stat().st_size)
        assert answer.headers["accept-ranges"] == "bytes"
        assert answer.headers["etag"] == f'"{adapter_sha256(stored)}-{name}"'
    admin = await closed.get(URL + CONFIG, headers=_auth(ADMIN))
    assert admin.status_code == 200


async def test_the_resolve_answer_lists_the_files(
    closed: httpx.AsyncClient, make_adapter: AdapterFactory
) -> None:
    stored = await _registered(closed, make_adapter)
    answer = await closed.get("/admin/v1/resolve/art-lora@1.0.0", headers=_auth())
    assert answer.json()["files"] == [
        {"name": CONFIG, "size": (stored / CONFIG).stat().st_size},
        {"name": WEIGHTS, "size": (stored / WEIGHTS).stat().st_size},
    ]


async def test_ranges_resume_a_download(
    closed: httpx.AsyncClient, make_adapter: AdapterFactory
) -> None:
    stored = await _registered(closed, make_adapter)
    whole = (stored / WEIGHTS).read_bytes()
    size = len(whole)
    part = await closed.get(URL + WEIGHTS, headers={**_auth(), "Range": "bytes=100-"})
    assert part.status_code == 206
    assert part.content == whole[100:]
    assert part.headers["content-range"] == f"bytes 100-{size - 1}/{size}"
    assert part.headers["content-length"] == str(size - 100)
    middle = await closed.get(URL + WEIGHTS, headers={**_auth(), "Range": "bytes=10-19"})
    assert (middle.status_code, middle.content) == (206, whole[10:20])
    tail = await closed.get(URL + WEIGHTS, headers={**_auth(), "Range": "bytes=-7"})
    assert (tail.status_code, tail.content) == (206, whole[-7:])
    # If-Range with the current tag resumes; with another tag the whole file comes back
    etag = part.headers["etag"]
    same = await closed.get(
        URL + WEIGHTS, headers={**_auth(), "Range": "bytes=5-", "If-Range": etag}
    )
    assert (same.status_code, same.content) == (206, whole[5:])
    other = await closed.get(
        URL + WEIGHTS, headers={**_auth(), "Range": "bytes=5-", "If-Range": '"old"'}
    )
    assert (other.status_code, other.content) == (200, whole)


async def test_unsatisfiable_range_is_416(
    closed: httpx.AsyncClient, make_adapter: AdapterFactory
) -> None:
    stored = await _registered(closed, make_adapter)
    size = (stored / WEIGHTS).stat().st_size
    answer = await closed.get(URL + WEIGHTS, headers={**_auth(), "Range": f"bytes={size}-"})
    assert answer.status_code == 416
    assert answer.headers["content-range"] == f"bytes */{size}"
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["code"] == "range_not_satisfiable"


async def test_head_answers_the_headers_only(
    closed: httpx.AsyncClient, make_adapter: AdapterFactory
) -> None:
    stored = await _registered(closed, make_adapter)
    answer = await closed.head(URL + WEIGHTS, headers=_auth())
    assert answer.status_code == 200
    assert answer.content == b""
    assert answer.headers["content-length"] == str((stored / WEIGHTS).stat().st_size)
    ranged = await closed.head(URL + WEIGHTS, headers={**_auth(), "Range": "bytes=0-9"})
    assert (ranged.status_code, ranged.headers["content-length"]) == (206, "10")


async def test_callers_without_a_resolver_or_admin_token_are_refused(
    closed: httpx.AsyncClient, make_adapter: AdapterFactory
) -> None:
    await _registered(closed, make_adapter)
    anonymous = await closed.get(URL + WEIGHTS)
    assert anonymous.status_code == 401
    assert anonymous.json()["code"] == "unauthorized"
    wrong = await closed.get(URL + WEIGHTS, headers=_auth("hml_not-a-token"))
    assert wrong.status_code == 401
    created = await closed.post(
        "/admin/v1/tokens", json={"name": "inf", "scope": "inference"}, headers=_auth(ADMIN)
    )
    narrow = await closed.get(URL + WEIGHTS, headers=_auth(created.json()["token"]))
    assert narrow.status_code == 403


@pytest.mark.parametrize(
    "tail",
    [
        "README.md",
        "adapter_model.bin",
        "..%2F..%2Fregistry.db",
        "..%2Fadapter_config.json",
        "%2E%2E",
    ],
)
async def test_other_files_and_traversal_are_404(
    closed: httpx.AsyncClient, make_adapter: AdapterFactory, tail: str
) -> None:
    await _registered(closed, make_adapter)
    answer = await closed.get(URL + tail, headers=_auth())
    assert answer.status_code == 404, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")


async def test_traversal_in_name_or_version_and_unknown_versions_are_404(
    closed: httpx.AsyncClient, make_adapter: AdapterFactory
) -> None:
    await _registered(closed, make_adapter)
    for path in (
        "/admin/v1/artifacts/..%2F..%2Fetc/1.0.0/" + CONFIG,
        "/admin/v1/artifacts/art-lora/..%2F1.0.0/" + CONFIG,
        "/admin/v1/artifacts/art-lora/9.9.9/" + CONFIG,
        "/admin/v1/artifacts/nope/1.0.0/" + CONFIG,
    ):
        answer = await closed.get(path, headers=_auth())
        assert answer.status_code == 404, (path, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")


async def test_a_missing_stored_file_is_404(
    closed: httpx.AsyncClient, make_adapter: AdapterFactory
) -> None:
    stored = await _registered(closed, make_adapter)
    (stored / WEIGHTS).unlink()
    answer = await closed.get(URL + WEIGHTS, headers=_auth())
    assert answer.status_code == 404
    assert answer.json()["code"] == "artifact_missing"


def test_artifact_downloads_skip_the_admission_queue() -> None:
    admission = AdminAdmission(app=None)  # type: ignore[arg-type]
    assert not admission.admits("/admin/v1/artifacts/a/1.0.0/" + WEIGHTS)
    assert not admission.admits("/admin/v1/resolve/a")
    assert admission.admits("/admin/v1/adapters")


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("bytes=0-9", (0, 9)),
        ("bytes=90-", (90, 99)),
        ("bytes=90-500", (90, 99)),
        ("bytes=-10", (90, 99)),
        ("bytes=-500", (0, 99)),
        ("bytes=100-", "unsatisfiable"),
        ("bytes=-0", "unsatisfiable"),
        ("bytes=9-3", None),
        ("bytes=0-1,5-6", None),
        ("items=0-1", None),
        ("bytes=-", None),
    ],
)
def test_parse_range(header: str | None, expected: object) -> None:
    assert parse_range(header, 100) == expected
