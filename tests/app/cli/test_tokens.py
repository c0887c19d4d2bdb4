"""``hi-moe-lora tokens`` and ``hi-moe-lora audit`` against a real control plane (uvicorn), with
access control on: the token comes from ``--token`` or ``HI_MOE_LORA_ADMIN_TOKEN``."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from hi_moe_lora.app.cli import main
from tests.openai.live import control_plane_settings, serve_control_plane
from tests.support.adapter_files import DEFAULT_BASE_MODEL

ADMIN = "hml_cli-test-admin-0123456789abcdefghijkl"


def test_tokens_and_audit_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = control_plane_settings(
        tmp_path / "cp", DEFAULT_BASE_MODEL, ["http://127.0.0.1:9"], admin_token=SecretStr(ADMIN)
    )
    served = serve_control_plane(settings)
    try:
        url = ["--url", served.url]
        monkeypatch.delenv("HI_MOE_LORA_ADMIN_TOKEN", raising=False)
        assert main(["tokens", "list", *url]) == 1
        assert "unauthorized" in capsys.readouterr().err
        assert (
            main(["tokens", "create", "ci-key", "--scope", "inference", "--token", ADMIN, *url])
            == 0
        )
        out = capsys.readouterr()
        secret = out.out.strip()
        assert secret.startswith("hml_")
        assert "shown only now" in out.err
        monkeypatch.setenv("HI_MOE_LORA_ADMIN_TOKEN", ADMIN)
        assert main(["tokens", "list", *url]) == 0
        listing = capsys.readouterr().out
        assert "ci-key" in listing
        assert secret not in listing
        assert main(["tokens", "revoke", "ci-key", *url]) == 0
        assert "revoked inference token 'ci-key'" in capsys.readouterr().out
        assert main(["audit", *url, "--actor", "admin"]) == 0
        audit = capsys.readouterr().out
        assert "token.create" in audit
        assert "token.revoke" in audit
    finally:
        served.stop()
