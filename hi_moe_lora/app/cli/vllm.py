"""``hi-moe-lora vllm``: start vLLM's OpenAI server with our plugins configured.

vLLM's API key comes from ``--api-key-env`` (default ``HI_MOE_LORA_API_KEY``, the variable the
control plane reads the same secret from) and reaches vLLM as ``VLLM_API_KEY``. Without a key
vLLM may bind only to a loopback address (``--insecure`` overrides). ``--print-only`` shows
every variable it sets, secrets as a reference to the variable they come from. A model this
host's vLLM cannot serve (an AWQ model on a CPU build without AVX-512:
:mod:`hi_moe_lora.app.host_support`) is refused before vLLM starts; ``--print-only`` warns.
On a host with a CUDA device it adds the serving flags measured fastest there
(``--cuda-serving``; :meth:`hi_moe_lora.app.vllm_launch.VllmLaunch.cuda_serving_args`).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any

from hi_moe_lora.app.host_support import cuda_device_present, unservable_reason
from hi_moe_lora.app.vllm_launch import (
    ALL_PLUGINS,
    ENV_CONTROL_PLANE_API_KEY,
    ENV_VLLM_API_KEY,
    SECRET_VARIABLES,
    VllmLaunch,
)
from hi_moe_lora.hosts import is_loopback
from plugins.settings import (
    ENV_ARTIFACT_CACHE_BYTES,
    ENV_ARTIFACT_CACHE_DIR,
    ENV_KERNELS,
    ENV_REGISTRY_URL,
    KERNEL_CHOICES,
    PluginSettingsError,
    parse_bytes,
)


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "vllm",
        help="start vLLM (CPU or GPU build) with the hi-moe-lora plugins",
        description=(
            "Start vLLM's OpenAI-compatible server with LoRA enabled, runtime adapter loading "
            "allowed and our plugins on VLLM_PLUGINS. Arguments after '--' go to vLLM as they are."
        ),
    )
    parser.add_argument("--model", required=True, help="base model path or id")
    parser.add_argument(
        "--registry-url",
        default=None,
        help=f"control plane URL the resolver asks (default: ${ENV_REGISTRY_URL})",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default: %(default)s); never expose vLLM's port: only the "
        "control plane should reach it (docs/security.md)",
    )
    parser.add_argument(
        "--api-key-env",
        default=ENV_CONTROL_PLANE_API_KEY,
        metavar="VARIABLE",
        help="environment variable holding vLLM's API key, the secret the control plane sends "
        f"(default: %(default)s; vLLM gets it as {ENV_VLLM_API_KEY})",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="allow binding to a non-loopback address without an API key",
    )
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-lora-rank", type=int, default=64)
    parser.add_argument("--max-loras", type=int, default=4)
    parser.add_argument("--max-cpu-loras", type=int, default=None)
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument(
        "--kernels",
        choices=KERNEL_CHOICES,
        default=None,
        help=f"multi-LoRA kernels on CUDA (default: ${ENV_KERNELS} or ours)",
    )
    parser.add_argument(
        "--plugins",
        default=",".join(ALL_PLUGINS),
        help="comma-separated VLLM_PLUGINS allow-list (default: %(default)s)",
    )
    parser.add_argument(
        "--metrics-dir",
        default=None,
        help="prometheus_client multiprocess directory (emptied at start): vLLM's /metrics then "
        "also shows the worker-side adapter load times of our plugins",
    )
    parser.add_argument(
        "--artifact-cache-dir",
        default=None,
        help=f"absolute directory where the resolver keeps adapter versions it downloads from "
        f"the control plane when their path is not on this host (default: "
        f"${ENV_ARTIFACT_CACHE_DIR}; unset: shared file system only)",
    )
    parser.add_argument(
        "--artifact-cache-bytes",
        default=None,
        help=f"that cache's size budget, bytes or e.g. 10G (default: "
        f"${ENV_ARTIFACT_CACHE_BYTES} or 20G)",
    )
    parser.add_argument(
        "--cuda-serving",
        choices=("auto", "on", "off"),
        default="auto",
        help="add the flags a CUDA host serves best with: --specialize-active-lora and CUDA "
        "graphs of 19 sizes up to 2,048 tokens (auto, the default: when torch sees a CUDA device "
        "here); flags after -- that decide either win",
    )
    parser.add_argument(
        "--print-only",
        action="store_true",
        help="print the environment and command instead of starting vLLM",
    )
    parser.add_argument("vllm_args", nargs=argparse.REMAINDER, help="-- then extra vLLM flags")
    parser.set_defaults(handler=run)


def key_source(args: argparse.Namespace) -> str | None:
    """The variable vLLM's key comes from: ``--api-key-env``'s, else ``VLLM_API_KEY`` when the
    environment already has one, else none."""
    for variable in (args.api_key_env, ENV_VLLM_API_KEY):
        if os.environ.get(variable):
            return str(variable)
    return None


def shown(key: str, value: str, source: str | None) -> str:
    """``KEY=value`` as ``--print-only`` prints it: a secret as the variable it comes from."""
    if key == ENV_VLLM_API_KEY and source is not None:
        return f'{key}="${source}"'
    if key in SECRET_VARIABLES:
        return f"{key}='***'"
    return f"{key}={shlex.quote(value)}"


def run(args: argparse.Namespace) -> int:
    extra = list(args.vllm_args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    source = key_source(args)
    cache_bytes = None
    if args.artifact_cache_bytes is not None:
        try:
            cache_bytes = parse_bytes(args.artifact_cache_bytes)
        except PluginSettingsError as exc:
            print(f"error: --artifact-cache-bytes: {exc}", file=sys.stderr)
            return 2
    cache_dir = args.artifact_cache_dir
    if cache_dir is not None and not os.path.isabs(os.path.expanduser(cache_dir)):
        print("error: --artifact-cache-dir must be an absolute directory", file=sys.stderr)
        return 2
    launch = VllmLaunch(
        model=args.model,
        registry_url=args.registry_url,
        host=args.host,
        port=args.port,
        max_lora_rank=args.max_lora_rank,
        max_loras=args.max_loras,
        max_cpu_loras=args.max_cpu_loras,
        max_model_len=args.max_model_len,
        dtype=args.dtype,
        kernels=args.kernels,
        plugins=tuple(name for name in args.plugins.split(",") if name),
        extra_args=tuple(extra),
        metrics_dir=args.metrics_dir,
        artifact_cache_dir=os.path.expanduser(cache_dir) if cache_dir is not None else None,
        artifact_cache_bytes=cache_bytes,
        api_key=os.environ[source] if source is not None else None,
        cuda_serving=args.cuda_serving == "on"
        or (args.cuda_serving == "auto" and cuda_device_present()),
    )
    argv = launch.command()
    try:
        variables = launch.variables()
    except PluginSettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if source is None:
        if not is_loopback(args.host) and not args.insecure:
            print(
                f"error: refusing to bind vLLM to {args.host} without an API key: set "
                f"{args.api_key_env} (the secret the control plane sends), or pass --insecure",
                file=sys.stderr,
            )
            return 2
        print(
            f"warning: no API key ({args.api_key_env} is unset): anyone who reaches "
            f"{args.host}:{args.port} can load and unload adapters and run inference",
            file=sys.stderr,
        )
    if ENV_REGISTRY_URL not in variables:
        print(
            f"warning: no --registry-url / {ENV_REGISTRY_URL}: the resolver plugin will "
            "stay inactive",
            file=sys.stderr,
        )
    unservable = unservable_reason(args.model)
    if unservable is not None:
        if not args.print_only:
            print(f"error: {unservable}", file=sys.stderr)
            return 2
        print(f"warning: {unservable}", file=sys.stderr)
    if args.print_only:
        for key, value in variables.items():
            print(shown(key, value, source))
        print(shlex.join(argv))
        return 0
    launch.prepare_metrics_dir()
    os.execvpe(argv[0], argv, {**os.environ, **variables})
