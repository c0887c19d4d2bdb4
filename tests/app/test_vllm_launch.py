from __future__ import annotations

from pathlib import Path

import pytest

from hi_moe_lora.app.vllm_launch import (
    ALL_PLUGINS,
    CUDA_GRAPH_SIZES,
    ENV_PROMETHEUS_MULTIPROC_DIR,
    ENV_VLLM_API_KEY,
    SECRET_VARIABLES,
    VllmLaunch,
)
from plugins.settings import PluginSettings, PluginSettingsError
from tests.support.vllm_args import parse_serve_args


def test_command_runs_the_openai_server_module_with_lora_enabled() -> None:
    launch = VllmLaunch(model="/models/tiny", port=9001, max_lora_rank=16, max_loras=2)
    argv = launch.command(python="/usr/bin/python3")
    assert argv[:3] == ["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--model") + 1] == "/models/tiny"
    assert argv[argv.index("--port") + 1] == "9001"
    assert argv[argv.index("--max-lora-rank") + 1] == "16"
    assert argv[argv.index("--max-loras") + 1] == "2"
    assert "--enable-lora" in argv
    assert "--dtype" not in argv


def test_optional_flags_and_extra_args_are_passed_in_order() -> None:
    launch = VllmLaunch(
        model="m", max_model_len=512, dtype="float32", extra_args=("--enforce-eager",)
    )
    argv = launch.command(python="py")
    assert argv[argv.index("--max-model-len") + 1] == "512"
    assert argv[argv.index("--dtype") + 1] == "float32"
    assert argv[-1] == "--enforce-eager"


def test_environment_enables_runtime_updates_and_allow_lists_our_plugins() -> None:
    env = VllmLaunch(model="m", registry_url="http://registry:8080", kernels="vllm").environment(
        {"PATH": "/bin", "VLLM_CPU_KVCACHE_SPACE": "4"}
    )
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "true"
    assert env["VLLM_PLUGINS"] == ",".join(ALL_PLUGINS)
    assert env["HI_MOE_LORA_REGISTRY_URL"] == "http://registry:8080"
    assert env["HI_MOE_LORA_KERNELS"] == "vllm"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "4"  # the caller's value wins
    assert env["PATH"] == "/bin"


def test_environment_without_registry_leaves_the_resolver_unconfigured() -> None:
    env = VllmLaunch(model="m", plugins=("hi_moe_lora_kernels",)).environment({})
    assert "HI_MOE_LORA_REGISTRY_URL" not in env
    assert env["VLLM_PLUGINS"] == "hi_moe_lora_kernels"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_plugin_variables_come_from_the_plugins_settings() -> None:
    variables = VllmLaunch(model="m", registry_url="http://cp:8080").variables(
        {"HI_MOE_LORA_KERNELS": "reference", "HI_MOE_LORA_RESOLVER_TIMEOUT_S": "3"}
    )
    # the caller's plugin settings are kept (and normalised), this launch's added
    assert PluginSettings.from_env(variables) == PluginSettings(
        registry_url="http://cp:8080", resolver_timeout_s=3.0, kernels="reference"
    )


def test_a_malformed_plugin_variable_is_refused_before_vllm_starts() -> None:
    with pytest.raises(PluginSettingsError, match="HI_MOE_LORA_KERNELS"):
        VllmLaunch(model="m").variables({"HI_MOE_LORA_KERNELS": "fastest"})


def test_without_a_metrics_dir_vllm_keeps_prometheus_single_process() -> None:
    launch = VllmLaunch(model="m")
    assert ENV_PROMETHEUS_MULTIPROC_DIR not in launch.variables({})
    assert launch.prepare_metrics_dir() is None


def test_a_metrics_dir_puts_every_vllm_process_in_multiprocess_mode(tmp_path: Path) -> None:
    directory = tmp_path / "metrics" / "vllm"
    launch = VllmLaunch(model="m", metrics_dir=str(directory))
    assert launch.variables({})[ENV_PROMETHEUS_MULTIPROC_DIR] == str(directory)
    assert launch.prepare_metrics_dir() == directory
    assert directory.is_dir()  # prometheus_client and vLLM's /metrics need it to exist


def test_prepare_metrics_dir_drops_a_previous_runs_samples(tmp_path: Path) -> None:
    (tmp_path / "histogram_4242.db").write_bytes(b"stale")  # summed again if left there
    (tmp_path / "counter_4243.db").write_bytes(b"stale")
    (tmp_path / "notes.txt").write_text("not ours")
    VllmLaunch(model="m", metrics_dir=str(tmp_path)).prepare_metrics_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_the_api_key_goes_to_vllms_environment_never_its_command_line() -> None:
    launch = VllmLaunch(model="m", api_key="s3cret-key")
    assert launch.variables({})[ENV_VLLM_API_KEY] == "s3cret-key"
    assert ENV_VLLM_API_KEY in SECRET_VARIABLES
    assert not any("s3cret-key" in arg for arg in launch.command(python="py"))
    assert "--api-key" not in launch.command(python="py")
    # vLLM's own check covers /v1 only: the guard extends it to every path
    argv = launch.command(python="py")
    assert argv[argv.index("--middleware") + 1] == "plugins.port_guard.KeyOnEveryPath"
    assert "--middleware" not in VllmLaunch(model="m").command(python="py")
    assert "s3cret-key" not in repr(launch)
    assert ENV_VLLM_API_KEY not in VllmLaunch(model="m").variables({})


def test_cuda_serving_adds_specialized_graphs_of_the_measured_sizes_before_extra_args() -> None:
    argv = VllmLaunch(model="m", cuda_serving=True, extra_args=("--seed", "7")).command("py")
    at = argv.index("--cudagraph-capture-sizes")
    sizes = argv[at + 1 : at + 1 + len(CUDA_GRAPH_SIZES)]
    assert sizes == [str(size) for size in CUDA_GRAPH_SIZES]
    assert "--specialize-active-lora" in argv
    assert argv[-2:] == ["--seed", "7"]
    assert "--specialize-active-lora" not in VllmLaunch(model="m").command("py")
    assert "--cudagraph-capture-sizes" not in VllmLaunch(model="m").command("py")


@pytest.mark.parametrize(
    ("extra", "specialize", "sizes"),
    [
        (("--no-specialize-active-lora",), False, True),
        (("--specialize_active_lora",), False, True),
        (("--cudagraph-capture-sizes", "1", "8"), True, False),
        (("--cudagraph_capture_sizes=1,8",), True, False),
        (("-cc", '{"mode": 0}'), True, False),
        (("--compilation-config.cudagraph_capture_sizes=[8]",), True, False),
        (("-O3",), True, False),
        (("--enforce-eager",), True, False),
        (("--max-num-seqs", "8"), True, True),
    ],
)
def test_the_users_own_flags_decide_over_cuda_serving(
    extra: tuple[str, ...], specialize: bool, sizes: bool
) -> None:
    ours = VllmLaunch(model="m", cuda_serving=True, extra_args=extra).cuda_serving_args()
    assert ("--specialize-active-lora" in ours) is specialize
    assert ("--cudagraph-capture-sizes" in ours) is sizes


def test_vllms_own_parser_reads_the_cuda_serving_flags() -> None:
    """The flags are vLLM's (0.32 here): its server's parser takes them, and a compilation config
    the user passes does not clash with sizes of ours (vLLM refuses the two together)."""
    served = parse_serve_args(VllmLaunch(model="m", cuda_serving=True).command("py")[3:])
    assert served.specialize_active_lora is True
    assert served.cudagraph_capture_sizes == list(CUDA_GRAPH_SIZES)
    extra = ("--no-specialize-active-lora", "-cc", '{"mode": 0}')
    argv = VllmLaunch(model="m", cuda_serving=True, extra_args=extra).command("py")[3:]
    users = parse_serve_args(argv)
    assert users.specialize_active_lora is False
    assert users.cudagraph_capture_sizes is None
