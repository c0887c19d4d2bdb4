"""Registration against hostile sources, through the admin API (real files, real app over ASGI).

Every rejected class answers a clear 4xx problem with a stable code, quotes neither a path nor a
file's contents, and leaves the registry as it was: no row, no file, no id consumed.
"""

from __future__ import annotations

import json
import math
import os
import stat
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from registry.settings import ControlPlaneSettings
from tests.registry.conftest import AdapterFactory
from tests.support.adapter_files import lora_tensors, safetensors_bytes, write_adapter

PROBLEM_JSON = "application/problem+json"
WEIGHTS = "adapter_model.safetensors"
#: A Llama-like base model whose projections all map 16 -> 16 features (the shapes
#: tests/support/adapter_files writes), so registration checks tensors against it.
MODEL_CONFIG = {
    "model_type": "llama",
    "hidden_size": 16,
    "intermediate_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "vocab_size": 32,
}
MAX_FILE_BYTES = 64 * 1024
MAX_FILES = 8
SECRET = b"root:x:0:0:root:/root:/bin/bash\n"


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "models" / "tiny-llama"
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(MODEL_CONFIG))
    return directory


@pytest.fixture
def settings(
    migrated_url: str, artifact_dir: Path, source_root: Path, model_dir: Path
) -> ControlPlaneSettings:
    return ControlPlaneSettings(
        database_url=migrated_url,
        artifact_dir=artifact_dir,
        base_model=str(model_dir),
        max_lora_rank=16,
        source_roots=[source_root],
        source_max_file_bytes=MAX_FILE_BYTES,
        source_max_artifact_bytes=MAX_FILE_BYTES + 1024,
        source_max_files=MAX_FILES,
        dispatch_embeddings=False,
        health_checks=False,
        warmup=False,
    )


Make = Callable[..., Path]


@pytest.fixture
def make(make_adapter: AdapterFactory, model_dir: Path) -> Make:
    def build(label: str, **options: Any) -> Path:
        return make_adapter(label, **{"base_model": str(model_dir), **options})

    return build


def _files(root: Path) -> list[str]:
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


async def _register(client: httpx.AsyncClient, name: str, source: Path | str) -> httpx.Response:
    body = {"version": "1.0.0", "source": str(source)}
    return await client.post(f"/admin/v1/adapters/{name}/versions", json=body)


def _set_value(directory: Path, value: float) -> None:
    """Overwrite the first weight of the first tensor (float32) with ``value``."""
    path = directory / WEIGHTS
    data = bytearray(path.read_bytes())
    start = 8 + struct.unpack("<Q", data[:8])[0]
    data[start : start + 4] = struct.pack("<f", value)
    path.write_bytes(bytes(data))


def _with_tensors(directory: Path, tensors: dict[str, tuple[int, ...]]) -> None:
    (directory / WEIGHTS).write_bytes(safetensors_bytes(tensors))


# each case: (build the source under ``root`` / ``tmp_path``) -> source, expected status, code
Case = tuple[Callable[[Make, Path, Path], Path | str], int, str]


def _symlink_to_secret(make: Make, root: Path, tmp_path: Path) -> Path:
    directory = make("leaky")
    secret = tmp_path / "secret.txt"
    secret.write_bytes(SECRET)
    (directory / WEIGHTS).unlink()
    (directory / WEIGHTS).symlink_to(secret)
    return directory


def _symlink_to_etc_passwd(make: Make, root: Path, tmp_path: Path) -> Path:
    directory = make("passwd")
    (directory / WEIGHTS).unlink()
    (directory / WEIGHTS).symlink_to("/etc/passwd")
    return directory


def _directory_link_out(make: Make, root: Path, tmp_path: Path) -> Path:
    outside = write_adapter(tmp_path / "outside")
    root.mkdir(parents=True, exist_ok=True)
    (root / "escape").symlink_to(outside, target_is_directory=True)
    return root / "escape"


def _dotdot(make: Make, root: Path, tmp_path: Path) -> str:
    write_adapter(tmp_path / "outside")
    make("inside")
    return f"{root}/inside/../../outside"


def _fifo(make: Make, root: Path, tmp_path: Path) -> Path:
    directory = make("fifo")
    (directory / WEIGHTS).unlink()
    os.mkfifo(directory / WEIGHTS)
    return directory


def _device(make: Make, root: Path, tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("mknod of a device needs root")
    directory = make("device")
    (directory / WEIGHTS).unlink()
    os.mknod(directory / WEIGHTS, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/null
    return directory


def _too_big(make: Make, root: Path, tmp_path: Path) -> Path:
    directory = make("big")
    with (directory / WEIGHTS).open("ab") as handle:
        handle.truncate(MAX_FILE_BYTES + 1)
    return directory


def _too_many_files(make: Make, root: Path, tmp_path: Path) -> Path:
    directory = make("crowded")
    for index in range(MAX_FILES):
        (directory / f"notes-{index}.md").write_text("x")
    return directory


def _pickle(make: Make, root: Path, tmp_path: Path) -> Path:
    directory = make("pickled")
    (directory / WEIGHTS).unlink()
    (directory / "adapter_model.bin").write_bytes(b"\x80\x02cos\nsystem\n(S'id'\ntR.")
    return directory


def _nan(make: Make, root: Path, tmp_path: Path) -> Path:
    directory = make("nan")
    _set_value(directory, math.nan)
    return directory


def _inf(make: Make, root: Path, tmp_path: Path) -> Path:
    directory = make("inf")
    _set_value(directory, -math.inf)
    return directory


def _wrong_shape(make: Make, root: Path, tmp_path: Path) -> Path:
    directory = make("shape")
    _with_tensors(directory, lora_tensors(("q_proj", "v_proj"), rank=8, hidden=24))
    return directory


def _unknown_tensor(make: Make, root: Path, tmp_path: Path) -> Path:
    directory = make("unknown")
    tensors = lora_tensors(("q_proj", "v_proj"), rank=8)
    tensors["base_model.model.model.layers.0.self_attn.q_proj.weight"] = (16, 16)
    _with_tensors(directory, tensors)
    return directory


def _module_the_model_lacks(make: Make, root: Path, tmp_path: Path) -> Path:
    return make("c-attn", target_modules=("q_proj", "c_attn"))


def _other_org_same_name(make: Make, root: Path, tmp_path: Path) -> Path:
    return make("evil", base_model="evil-org/tiny-llama")


def _not_safetensors(make: Make, root: Path, tmp_path: Path) -> Path:
    directory = make("text")
    (directory / WEIGHTS).write_bytes(SECRET * 4)
    return directory


CASES: dict[str, Case] = {
    "symlink-out-of-root": (_symlink_to_secret, 422, "source_not_allowed"),
    "symlink-to-etc-passwd": (_symlink_to_etc_passwd, 422, "source_not_allowed"),
    "directory-link-out-of-root": (_directory_link_out, 422, "source_not_allowed"),
    "dotdot": (_dotdot, 422, "source_not_allowed"),
    "host-path": (lambda make, root, tmp: "/etc", 422, "source_not_allowed"),
    "proc-self": (lambda make, root, tmp: "/proc/self/cwd", 422, "source_not_allowed"),
    "missing-host-path": (lambda make, root, tmp: "/no/such/dir", 422, "source_not_allowed"),
    "fifo": (_fifo, 422, "source_special_file"),
    "device": (_device, 422, "source_special_file"),
    "too-big": (_too_big, 422, "source_too_large"),
    "too-many-files": (_too_many_files, 422, "source_too_many_files"),
    "pickle-bin": (_pickle, 422, "pickle_weights"),
    "nan": (_nan, 422, "non_finite_weights"),
    "inf": (_inf, 422, "non_finite_weights"),
    "wrong-shape": (_wrong_shape, 422, "tensor_shape_mismatch"),
    "unknown-tensor": (_unknown_tensor, 422, "unknown_tensor"),
    "module-the-model-lacks": (_module_the_model_lacks, 422, "unknown_module"),
    "other-org-same-name": (_other_org_same_name, 422, "base_model_mismatch"),
    "not-safetensors": (_not_safetensors, 422, "corrupt_weights"),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_hostile_source_is_refused_and_changes_nothing(
    client: httpx.AsyncClient,
    make: Make,
    source_root: Path,
    artifact_dir: Path,
    tmp_path: Path,
    case: str,
) -> None:
    good = await _register(client, "keep-lora", make("good"))
    assert good.status_code == 201, good.text
    assert good.json()["lora_int_id"] == 1
    before_db = (await client.get("/admin/v1/adapters")).json()
    before_files = _files(artifact_dir)

    build, status, code = CASES[case]
    response = await _register(client, "bad-lora", build(make, source_root, tmp_path))

    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM_JSON
    problem = response.json()
    assert problem["code"] == code
    assert problem["status"] == status
    assert problem["title"]
    assert problem["detail"]
    for leak in (str(tmp_path), "/etc", "/proc", "root:x", "passwd", "/bin/bash", ".staging"):
        assert leak not in response.text, leak
    assert (await client.get("/admin/v1/adapters")).json() == before_db
    assert _files(artifact_dir) == before_files
    assert not list((artifact_dir / ".staging").iterdir())
    after = await _register(client, "next-lora", make("next", seed=3))
    assert after.json()["lora_int_id"] == 2  # the refused attempt consumed no id


async def test_an_adapter_that_fits_the_model_registers(
    client: httpx.AsyncClient, make: Make
) -> None:
    every = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    response = await _register(client, "all-lora", make("all", target_modules=every))
    assert response.status_code == 201, response.text
    assert response.json()["target_modules"] == sorted(every)


async def test_no_source_roots_refuses_with_the_setting_named(
    migrated_url: str, artifact_dir: Path, make: Make, model_dir: Path
) -> None:
    from registry.app import create_app

    app = create_app(
        ControlPlaneSettings(
            database_url=migrated_url,
            artifact_dir=artifact_dir,
            base_model=str(model_dir),
            dispatch_embeddings=False,
            health_checks=False,
            warmup=False,
        )
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://registry") as http:
            response = await _register(http, "a-lora", make("a"))
            assert response.status_code == 503
            assert response.json()["code"] == "source_roots_not_configured"
            assert "HI_MOE_LORA_SOURCE_ROOTS" in response.json()["detail"]
            assert (await http.get("/admin/v1/adapters")).json() == {"adapters": []}
    assert _files(artifact_dir) == []
