"""``hi-moe-lora db``: upgrade, current, check and downgrade, in process, on real databases."""

from __future__ import annotations

import pytest

from hi_moe_lora.app.cli import main
from registry.db import migrate


def test_upgrade_current_check(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    head = migrate.head_revision()
    assert main(["db", "--database-url", database_url, "check"]) == 1
    assert "hi-moe-lora db upgrade" in capsys.readouterr().err
    assert main(["db", "--database-url", database_url, "current"]) == 0
    assert capsys.readouterr().out.strip() == "(empty)"

    assert main(["db", "--database-url", database_url, "upgrade"]) == 0
    assert migrate.current_revision(database_url) == head
    assert main(["db", "--database-url", database_url, "current"]) == 0
    assert f"{head} (head)" in capsys.readouterr().out
    assert main(["db", "--database-url", database_url, "check"]) == 0

    assert main(["db", "--database-url", database_url, "downgrade", "base"]) == 0
    assert migrate.current_revision(database_url) is None


def test_url_from_the_environment(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HI_MOE_LORA_DATABASE_URL", sqlite_url)
    assert main(["db", "upgrade"]) == 0
    assert migrate.is_at_head(sqlite_url)
