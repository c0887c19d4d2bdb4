from __future__ import annotations

import json
from pathlib import Path

import pytest

from hi_moe_lora.adapters import AdapterValidationError, inspect_adapter
from hi_moe_lora.adapters.checksum import adapter_sha256
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter


def _code(directory: Path) -> str:
    with pytest.raises(AdapterValidationError) as caught:
        inspect_adapter(directory)
    return caught.value.code


def _patch_config(directory: Path, **changes: object) -> None:
    path = directory / "adapter_config.json"
    config = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    path.write_text(json.dumps(config))


def test_manifest_of_a_valid_adapter(tmp_path: Path) -> None:
    directory = write_adapter(tmp_path / "a", rank=8, alpha=16, target_modules=("v_proj", "q_proj"))
    manifest = inspect_adapter(directory)
    assert manifest.rank == 8
    assert manifest.alpha == 16.0
    assert manifest.target_modules == ("q_proj", "v_proj")
    assert manifest.variant == "lora"
    assert manifest.base_model == DEFAULT_BASE_MODEL
    assert manifest.weight_file == "adapter_model.safetensors"
    assert manifest.tensor_count == 4
    assert manifest.sha256 == adapter_sha256(directory)


def test_dora_variant_and_regex_targets(tmp_path: Path) -> None:
    directory = write_adapter(tmp_path / "a", use_dora=True)
    _patch_config(directory, target_modules=r".*\.(q|v)_proj")
    manifest = inspect_adapter(directory)
    assert manifest.variant == "dora"
    assert manifest.target_modules == (r".*\.(q|v)_proj",)


def test_rank_pattern_raises_the_rank(tmp_path: Path) -> None:
    directory = write_adapter(tmp_path / "a", rank=8)
    _patch_config(directory, rank_pattern={"q_proj": 32})
    assert inspect_adapter(directory).rank == 32


@pytest.mark.parametrize("name", ["adapter_model.bin", "adapter_model.pt"])
def test_pickled_weights_are_refused(tmp_path: Path, name: str) -> None:
    directory = write_adapter(tmp_path / "a")
    (directory / "adapter_model.safetensors").unlink()
    (directory / name).write_bytes(b"\x80\x02pickled")
    with pytest.raises(AdapterValidationError) as caught:
        inspect_adapter(directory)
    assert caught.value.code == "pickle_weights"
    assert "pickled" not in caught.value.detail


def test_a_pickle_beside_safetensors_is_ignored(tmp_path: Path) -> None:
    directory = write_adapter(tmp_path / "a")
    (directory / "adapter_model.bin").write_bytes(b"\x80\x02pickled")
    assert inspect_adapter(directory).weight_file == "adapter_model.safetensors"


def test_missing_config_and_directory(tmp_path: Path) -> None:
    assert _code(tmp_path / "nowhere") == "missing_config"
    directory = write_adapter(tmp_path / "a")
    (directory / "adapter_config.json").unlink()
    assert _code(directory) == "missing_config"


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '"string"', ""])
def test_malformed_config(tmp_path: Path, text: str) -> None:
    directory = write_adapter(tmp_path / "a")
    (directory / "adapter_config.json").write_text(text)
    assert _code(directory) == "malformed_config"


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"peft_type": "IA3"}, "unsupported_peft_type"),
        ({"peft_type": "ADALORA"}, "unsupported_peft_type"),
        ({"peft_type": None}, "malformed_config"),
        ({"r": 0}, "malformed_config"),
        ({"r": "8"}, "malformed_config"),
        ({"r": True}, "malformed_config"),
        ({"lora_alpha": -1}, "malformed_config"),
        ({"use_dora": "yes"}, "malformed_config"),
        ({"target_modules": []}, "bad_target_modules"),
        ({"target_modules": None}, "bad_target_modules"),
        ({"target_modules": ["q_proj", 3]}, "bad_target_modules"),
        ({"target_modules": "(unclosed"}, "bad_target_modules"),
        ({"base_model_name_or_path": 42}, "malformed_config"),
    ],
)
def test_bad_config_fields(tmp_path: Path, changes: dict[str, object], code: str) -> None:
    directory = write_adapter(tmp_path / "a")
    _patch_config(directory, **changes)
    assert _code(directory) == code


def test_missing_weights(tmp_path: Path) -> None:
    directory = write_adapter(tmp_path / "a")
    (directory / "adapter_model.safetensors").unlink()
    assert _code(directory) == "missing_weights"


def test_truncated_and_garbage_weights(tmp_path: Path) -> None:
    directory = write_adapter(tmp_path / "a")
    weights = directory / "adapter_model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    assert _code(directory) == "corrupt_weights"
    weights.write_bytes(b"this is not a safetensors file at all")
    assert _code(directory) == "corrupt_weights"


def test_tensor_rank_larger_than_config_is_corrupt(tmp_path: Path) -> None:
    directory = write_adapter(tmp_path / "a", rank=16)
    _patch_config(directory, r=4)
    assert _code(directory) == "corrupt_weights"
