from __future__ import annotations

import shlex

import pytest

from hi_moe_lora.app.cli import main


def test_print_only_shows_the_environment_and_command(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "vllm",
            "--model",
            "/models/tiny",
            "--registry-url",
            "http://127.0.0.1:8080",
            "--port",
            "8123",
            "--kernels",
            "vllm",
            "--print-only",
            "--",
            "--enforce-eager",
        ]
    )
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=true" in lines
    assert "VLLM_PLUGINS=hi_moe_lora_resolver,hi_moe_lora_kernels" in lines
    assert "HI_MOE_LORA_REGISTRY_URL=http://127.0.0.1:8080" in lines
    assert "HI_MOE_LORA_KERNELS=vllm" in lines
    argv = shlex.split(lines[-1])
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--port") + 1] == "8123"
    assert argv[-1] == "--enforce-eager"


def test_without_registry_it_warns_that_the_resolver_stays_inactive(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HI_MOE_LORA_REGISTRY_URL", raising=False)
    assert main(["vllm", "--model", "m", "--plugins", "hi_moe_lora_kernels", "--print-only"]) == 0
    captured = capsys.readouterr()
    assert "resolver plugin will stay inactive" in captured.err
    assert "VLLM_PLUGINS=hi_moe_lora_kernels" in captured.out


def test_unknown_kernels_choice_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["vllm", "--model", "m", "--kernels", "fast", "--print-only"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'fast'" in capsys.readouterr().err


def test_a_malformed_plugin_variable_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HI_MOE_LORA_RESOLVER_TIMEOUT_S", "soon")
    assert main(["vllm", "--model", "m", "--print-only"]) == 2
    assert "HI_MOE_LORA_RESOLVER_TIMEOUT_S='soon'" in capsys.readouterr().err


def test_metrics_dir_is_passed_as_prometheus_multiproc_dir(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["vllm", "--model", "m", "--metrics-dir", "/tmp/vllm-metrics", "--print-only"])
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "PROMETHEUS_MULTIPROC_DIR=/tmp/vllm-metrics" in lines


def test_print_only_shows_the_cpu_kv_cache_space_it_sets(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["vllm", "--model", "m", "--registry-url", "http://r:8080", "--print-only"]
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    assert main(argv) == 0
    assert "VLLM_CPU_KVCACHE_SPACE=1" in capsys.readouterr().out.splitlines()
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "8")  # the operator's choice is kept
    assert main(argv) == 0
    assert "VLLM_CPU_KVCACHE_SPACE=8" in capsys.readouterr().out.splitlines()
