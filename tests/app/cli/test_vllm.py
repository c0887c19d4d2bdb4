from __future__ import annotations

import shlex

import pytest

from hi_moe_lora.app.cli import main
from hi_moe_lora.app.cli import vllm as vllm_command


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


def test_print_only_shows_the_api_key_as_a_reference_never_its_value(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HI_MOE_LORA_API_KEY", "s3cret-key")
    assert main(["vllm", "--model", "m", "--registry-url", "http://r:8080", "--print-only"]) == 0
    captured = capsys.readouterr()
    assert 'VLLM_API_KEY="$HI_MOE_LORA_API_KEY"' in captured.out.splitlines()
    assert "s3cret-key" not in captured.out + captured.err
    assert "no API key" not in captured.err
    # another variable can hold it
    monkeypatch.delenv("HI_MOE_LORA_API_KEY")
    monkeypatch.setenv("MY_VLLM_KEY", "other-secret")
    argv = ["vllm", "--model", "m", "--api-key-env", "MY_VLLM_KEY", "--print-only"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert 'VLLM_API_KEY="$MY_VLLM_KEY"' in out.splitlines()
    assert "other-secret" not in out


def test_without_a_key_vllm_binds_only_to_loopback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HI_MOE_LORA_API_KEY", raising=False)
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    assert main(["vllm", "--model", "m", "--print-only"]) == 0
    captured = capsys.readouterr()
    assert "no API key" in captured.err
    assert "VLLM_API_KEY" not in captured.out
    for host in ("0.0.0.0", "10.0.0.5", "vllm.internal"):
        assert main(["vllm", "--model", "m", "--host", host, "--print-only"]) == 2
        assert f"refusing to bind vLLM to {host} without an API key" in capsys.readouterr().err
    argv = ["vllm", "--model", "m", "--host", "0.0.0.0", "--insecure", "--print-only"]
    assert main(argv) == 0
    assert "no API key" in capsys.readouterr().err
    monkeypatch.setenv("HI_MOE_LORA_API_KEY", "k")
    assert main(["vllm", "--model", "m", "--host", "10.0.0.5", "--print-only"]) == 0
    capsys.readouterr()
    # a key already in vLLM's own variable counts, and gets the port guard too
    monkeypatch.delenv("HI_MOE_LORA_API_KEY")
    monkeypatch.setenv("VLLM_API_KEY", "own-key")
    assert main(["vllm", "--model", "m", "--host", "10.0.0.5", "--print-only"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert 'VLLM_API_KEY="$VLLM_API_KEY"' in lines
    assert "plugins.port_guard.KeyOnEveryPath" in shlex.split(lines[-1])


def test_a_model_the_host_cannot_serve_is_refused_before_vllm_starts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host condition is set here (host_support's own tests check it against vLLM); what
    is tested is what the command does with it: exit 2 without exec'ing vLLM, and a warning
    only under --print-only."""
    reasons: list[str] = []

    def unservable(model: str) -> str:
        reasons.append(model)
        return f"{model} needs AVX-512"

    monkeypatch.setattr(vllm_command, "unservable_reason", unservable)
    assert main(["vllm", "--model", "/models/awq"]) == 2
    assert "error: /models/awq needs AVX-512" in capsys.readouterr().err
    assert main(["vllm", "--model", "/models/awq", "--print-only"]) == 0
    captured = capsys.readouterr()
    assert "warning: /models/awq needs AVX-512" in captured.err
    assert "api_server" in captured.out
    assert reasons == ["/models/awq", "/models/awq"]


@pytest.mark.parametrize(
    ("choice", "cuda_here", "added"),
    [("on", False, True), ("off", True, False), ("auto", True, True), ("auto", False, False)],
)
def test_cuda_serving_adds_the_gpu_hosts_flags_on_a_cuda_host_or_when_asked(
    choice: str,
    cuda_here: bool,
    added: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(vllm_command, "cuda_device_present", lambda: cuda_here)
    code = main(["vllm", "--model", "m", "--cuda-serving", choice, "--print-only"])
    assert code == 0
    argv = shlex.split(capsys.readouterr().out.strip().splitlines()[-1])
    assert ("--specialize-active-lora" in argv) is added
    assert ("--cudagraph-capture-sizes" in argv) is added


def test_cuda_serving_leaves_a_flag_the_user_passes_to_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(vllm_command, "cuda_device_present", lambda: True)
    argv = ["vllm", "--model", "m", "--print-only", "--", "--cudagraph-capture-sizes", "8"]
    assert main(argv) == 0
    command = shlex.split(capsys.readouterr().out.strip().splitlines()[-1])
    assert command.count("--cudagraph-capture-sizes") == 1
    assert command[-2:] == ["--cudagraph-capture-sizes", "8"]
    assert "--specialize-active-lora" in command
