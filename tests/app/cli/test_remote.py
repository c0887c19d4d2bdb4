"""How the CLI reaches the control plane: its own variable, ``HI_MOE_LORA_URL``."""

from __future__ import annotations

from hi_moe_lora.app.cli.remote import DEFAULT_URL, ENV_URL, control_plane_url


def test_control_plane_url() -> None:
    assert control_plane_url({}) == DEFAULT_URL
    assert control_plane_url({ENV_URL: "  "}) == DEFAULT_URL
    assert control_plane_url({ENV_URL: "http://cp:8080/"}) == "http://cp:8080"
