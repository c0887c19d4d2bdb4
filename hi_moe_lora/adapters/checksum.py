"""A content checksum for a PEFT adapter directory.

The digest covers exactly the files vLLM reads (``adapter_config.json`` and the weight files),
so the control plane and the resolver plugin agree on it wherever the directory lives.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

CONFIG_FILE = "adapter_config.json"
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin", "adapter_model.pt")
_CHUNK = 1 << 20


def adapter_files(directory: Path) -> list[Path]:
    """The files of an adapter directory that take part in its checksum, in a fixed order."""
    names = [CONFIG_FILE, *WEIGHT_FILES]
    return [directory / name for name in names if (directory / name).is_file()]


def adapter_sha256(directory: Path) -> str:
    """Hex sha256 over (name, size, bytes) of each adapter file, in a fixed order."""
    digest = hashlib.sha256()
    for path in adapter_files(directory):
        digest.update(path.name.encode())
        digest.update(path.stat().st_size.to_bytes(8, "little"))
        with path.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()
