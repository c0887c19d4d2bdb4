from __future__ import annotations

import pytest

from hi_moe_lora.served_names import ServedName
from registry.errors import InvalidRequestError, NotFoundError
from registry.services.naming import check_name, check_version, served_name_or_not_found


@pytest.mark.parametrize("name", ["python-lora", "a", "0x", "web.lora_v2", "a" * 64])
def test_good_names(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", "Python", "-a", ".a", "a@b", "a/b", "a b", "a" * 65])
def test_bad_names(name: str) -> None:
    with pytest.raises(InvalidRequestError):
        check_name(name)


@pytest.mark.parametrize("version", ["0.0.0", "1.2.3", "1.0.0-rc.1", "1.0.0+build.5", "2.0.0-a-b"])
def test_good_versions(version: str) -> None:
    assert check_version(version) == version


@pytest.mark.parametrize("version", ["1", "1.2", "v1.2.3", "01.2.3", "1.2.3-", "1.2.3+", "1.2.3.4"])
def test_bad_versions(version: str) -> None:
    with pytest.raises(InvalidRequestError):
        check_version(version)


def test_served_names() -> None:
    assert served_name_or_not_found("python-lora") == ServedName("python-lora")
    assert served_name_or_not_found("python-lora@1.2.0") == ServedName("python-lora", "1.2.0")
    for bad in ("python-lora@", "python-lora@latest", "@1.0.0", "Bad@1.0.0"):
        with pytest.raises(NotFoundError, match="no adapter named"):
            served_name_or_not_found(bad)
