"""Start-up rules: open only on loopback (or when told ``insecure``), loudly; settings that need
access control refused without an admin secret; ``hi-moe-lora serve`` says so in one line."""

from __future__ import annotations

import logging

import pytest
from pydantic import SecretStr

from hi_moe_lora.app.cli import main
from registry.access.errors import AccessConfigurationError
from registry.access.gatekeeper import Openings
from registry.access.startup import refusal
from registry.app import access_refusal, create_app
from registry.settings import ControlPlaneSettings


def test_refusals() -> None:
    open_ = Openings()
    assert refusal(closed=False, host="127.0.0.1", insecure=False, openings=open_) is None
    reason = refusal(closed=False, host="0.0.0.0", insecure=False, openings=open_)
    assert reason is not None
    assert "HI_MOE_LORA_ADMIN_TOKEN" in reason
    assert "--insecure" in reason
    assert refusal(closed=False, host="0.0.0.0", insecure=True, openings=open_) is None
    assert refusal(closed=True, host="0.0.0.0", insecure=False, openings=open_) is None
    for openings in (
        Openings(require_api_keys=True),
        Openings(metrics_public=False),
        Openings(health_public=False),
    ):
        reason = refusal(closed=False, host="127.0.0.1", insecure=True, openings=openings)
        assert reason is not None
        assert "needs access control" in reason


async def test_the_app_refuses_to_start_open_on_a_public_address(
    base_settings: ControlPlaneSettings, caplog: pytest.LogCaptureFixture
) -> None:
    public = base_settings.model_copy(update={"host": "0.0.0.0"})
    app = create_app(public)
    with pytest.raises(AccessConfigurationError, match="not a loopback address"):
        async with app.router.lifespan_context(app):
            pass
    insecure = create_app(public.model_copy(update={"insecure": True}))
    with caplog.at_level(logging.WARNING):
        async with insecure.router.lifespan_context(insecure):
            pass
    assert "ACCESS CONTROL IS OFF" in caplog.text
    closed = create_app(public.model_copy(update={"admin_token": SecretStr("hml_x" * 10)}))
    async with closed.router.lifespan_context(closed):
        assert closed.components.gatekeeper.closed


async def test_api_keys_without_access_control_refuse_to_start(
    base_settings: ControlPlaneSettings,
) -> None:
    app = create_app(base_settings.model_copy(update={"require_api_keys": True}))
    with pytest.raises(AccessConfigurationError, match="REQUIRE_API_KEYS"):
        async with app.router.lifespan_context(app):
            pass


def test_serve_refuses_in_one_line(
    base_settings: ControlPlaneSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    url = base_settings.database_url
    assert main(["serve", "--host", "0.0.0.0", "--database-url", url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: refusing to serve without access control on '0.0.0.0'")
    assert (
        access_refusal(base_settings.model_copy(update={"host": "0.0.0.0", "insecure": True}))
        is None
    )


def test_settings_take_a_secret_or_its_hash_not_both() -> None:
    with pytest.raises(ValueError, match="not both"):
        ControlPlaneSettings(admin_token=SecretStr("a"), admin_token_sha256="0" * 64)
    with pytest.raises(ValueError, match="admin_token_sha256"):
        ControlPlaneSettings(admin_token_sha256="not-a-hash")
