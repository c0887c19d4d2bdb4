"""SourcePolicy: what registration may read, checked before anything is copied."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from registry.errors import ConfigurationError, RegistryError
from registry.services.sources import SourceLimits, SourcePolicy
from tests.support.adapter_files import write_adapter


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return (tmp_path / "root").resolve()


def _code(policy: SourcePolicy, source: str) -> str:
    with pytest.raises(RegistryError) as caught:
        policy.check(source)
    assert str(policy.roots[0]) not in caught.value.detail if policy.roots else True
    assert source not in caught.value.detail
    return caught.value.code


def test_path_and_uri_forms(root: Path) -> None:
    directory = write_adapter(root / "my adapter")
    (directory / "README.md").write_text("not copied")
    policy = SourcePolicy([root])
    for form in (str(directory), directory.as_uri(), f"{directory}/"):
        checked = policy.check(form)
        assert checked.directory == directory
        assert [f.name for f in checked.files] == [
            "adapter_config.json",
            "adapter_model.safetensors",
        ]
    assert _code(policy, "https://example.com/adapter") == "unsupported_source"
    assert _code(policy, "file://otherhost/x") == "unsupported_source"
    assert _code(policy, str(root / "missing")) == "source_not_found"
    assert _code(policy, str(directory / "adapter_config.json")) == "source_not_found"


def test_no_roots_refuses_everything(root: Path) -> None:
    directory = write_adapter(root / "a")
    with pytest.raises(ConfigurationError) as caught:
        SourcePolicy([]).check(str(directory))
    assert caught.value.code == "source_roots_not_configured"
    assert "HI_MOE_LORA_SOURCE_ROOTS" in caught.value.detail


@pytest.mark.parametrize(
    "source",
    ["/etc", "/proc/self", "/no/such/dir", "relative/dir", "/", "~"],
)
def test_outside_the_roots_is_refused_without_a_probe(root: Path, source: str) -> None:
    write_adapter(root / "a")
    assert _code(SourcePolicy([root]), source) == "source_not_allowed"


def test_dotdot_is_refused_even_inside_the_root(root: Path) -> None:
    write_adapter(root / "a")
    policy = SourcePolicy([root])
    assert _code(policy, f"{root}/a/../a") == "source_not_allowed"
    assert _code(policy, f"{root}/../../etc") == "source_not_allowed"
    assert _code(policy, (root / "a").as_uri() + "/../../..") == "source_not_allowed"


def test_a_root_prefix_is_not_a_root(tmp_path: Path, root: Path) -> None:
    sibling = write_adapter(
        tmp_path / "root-other" / "a"
    )  # "/x/root" must not admit "/x/root-other"
    assert _code(SourcePolicy([root]), str(sibling)) == "source_not_allowed"


def test_symlinks(tmp_path: Path, root: Path) -> None:
    outside = write_adapter(tmp_path / "outside")
    inside = write_adapter(root / "real")
    policy = SourcePolicy([root])
    # a directory link leading out of the root
    (root / "escape").symlink_to(outside, target_is_directory=True)
    assert _code(policy, str(root / "escape")) == "source_not_allowed"
    # a weights file linking out of the root (to a secret, say)
    leaky = write_adapter(root / "leaky")
    (leaky / "adapter_model.safetensors").unlink()
    (leaky / "adapter_model.safetensors").symlink_to("/etc/passwd")
    assert _code(policy, str(leaky)) == "source_not_allowed"
    # links that stay inside the roots are followed (a hub cache's snapshot -> blobs layout)
    (root / "alias").symlink_to(inside, target_is_directory=True)
    assert policy.check(str(root / "alias")).directory == inside
    linked = root / "linked"
    linked.mkdir()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (linked / name).symlink_to(inside / name)
    checked = policy.check(str(linked))
    assert {f.path for f in checked.files} == {
        inside / "adapter_config.json",
        inside / "adapter_model.safetensors",
    }
    # a dangling link
    (linked / "adapter_config.json").unlink()
    (linked / "adapter_config.json").symlink_to(root / "nothing-here")
    assert _code(policy, str(linked)) == "source_not_found"


def test_a_root_that_is_itself_a_link(tmp_path: Path, root: Path) -> None:
    directory = write_adapter(root / "a")
    link = tmp_path / "root-link"
    link.symlink_to(root, target_is_directory=True)
    assert SourcePolicy([link]).check(str(link / "a")).directory == directory
    assert SourcePolicy([link]).check(str(directory)).directory == directory


def test_special_files_are_refused_without_being_opened(root: Path) -> None:
    directory = write_adapter(root / "fifo")
    (directory / "adapter_model.safetensors").unlink()
    os.mkfifo(directory / "adapter_model.safetensors")  # opening it would block forever
    assert _code(SourcePolicy([root]), str(directory)) == "source_special_file"
    as_dir = write_adapter(root / "dir")
    (as_dir / "adapter_config.json").unlink()
    (as_dir / "adapter_config.json").mkdir()
    assert _code(SourcePolicy([root]), str(as_dir)) == "source_special_file"


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a device needs root")
def test_device_files_are_refused(root: Path) -> None:
    directory = write_adapter(root / "device")
    (directory / "adapter_model.safetensors").unlink()
    os.mknod(directory / "adapter_model.safetensors", stat.S_IFCHR | 0o600, os.makedev(1, 5))
    assert _code(SourcePolicy([root]), str(directory)) == "source_special_file"


def test_limits(root: Path) -> None:
    directory = write_adapter(root / "a")
    weights = (directory / "adapter_model.safetensors").stat().st_size
    config = (directory / "adapter_config.json").stat().st_size
    fits = SourceLimits(max_file_bytes=weights, max_artifact_bytes=weights + config, max_files=2)
    SourcePolicy([root], fits).check(str(directory))
    for limits in (
        SourceLimits(max_file_bytes=weights - 1),
        SourceLimits(max_artifact_bytes=weights + config - 1),
    ):
        assert _code(SourcePolicy([root], limits), str(directory)) == "source_too_large"
    (directory / "README.md").write_text("one more entry")
    assert _code(SourcePolicy([root], fits), str(directory)) == "source_too_many_files"


def test_pickle_only_is_refused_before_copying(root: Path) -> None:
    directory = write_adapter(root / "a")
    (directory / "adapter_model.safetensors").unlink()
    (directory / "adapter_model.bin").write_bytes(b"\x80\x02pickled")
    assert _code(SourcePolicy([root]), str(directory)) == "pickle_weights"


def test_a_file_swapped_after_the_check_is_not_copied(tmp_path: Path, root: Path) -> None:
    directory = write_adapter(root / "a")
    checked = SourcePolicy([root]).check(str(directory))
    replacement = write_adapter(root / "b", seed=3) / "adapter_model.safetensors"
    os.replace(replacement, directory / "adapter_model.safetensors")  # another inode
    target = tmp_path / "copy"
    target.mkdir()
    with pytest.raises(RegistryError) as caught:
        checked.copy_to(target)
    assert caught.value.code == "source_changed"
    # swapped for a link after the check: O_NOFOLLOW refuses it
    checked = SourcePolicy([root]).check(str(directory))
    (directory / "adapter_model.safetensors").unlink()
    (directory / "adapter_model.safetensors").symlink_to("/etc/passwd")
    (tmp_path / "copy-2").mkdir()
    with pytest.raises(RegistryError) as caught:
        checked.copy_to(tmp_path / "copy-2")
    assert caught.value.code == "source_changed"


def test_a_file_that_grows_after_the_check_is_cut_off(tmp_path: Path, root: Path) -> None:
    directory = write_adapter(root / "a")
    size = (directory / "adapter_model.safetensors").stat().st_size
    limits = SourceLimits(max_file_bytes=size)
    checked = SourcePolicy([root], limits).check(str(directory))
    with (directory / "adapter_model.safetensors").open("ab") as handle:
        handle.write(b"\0" * 10)
    target = tmp_path / "copy"
    target.mkdir()
    with pytest.raises(RegistryError) as caught:
        checked.copy_to(target)
    assert caught.value.code == "source_too_large"
