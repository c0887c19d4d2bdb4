"""Settings of the vLLM plugins, read from the environment of the vLLM process.

The plugins run inside vLLM (API server, engine core, every worker), so this module uses only the
standard library: no pydantic-settings, which belongs to the control plane. It is the one place
that names the plugin's variables: the plugins read them through :meth:`PluginSettings.from_env`,
and launchers write them through :meth:`PluginSettings.to_env` (vLLM's ``envs.py`` is the model).

Variables (all optional):

- ``HI_MOE_LORA_REGISTRY_URL``: base URL of the control plane (``http://registry:8080``). Unset:
  the resolver stays off.
- ``HI_MOE_LORA_RESOLVER_TIMEOUT_S``: timeout of one registry lookup, seconds (default 10).
- ``HI_MOE_LORA_RESOLVER_TOKEN``: the bearer token the resolver sends to the control plane (a
  ``resolver`` token: the control plane's bootstrap secret of the same name, or one made with
  ``hi-moe-lora tokens create NAME --scope resolver``). Needed once access control is on.
- ``HI_MOE_LORA_KERNELS``: ``ours`` (default), ``vllm`` or ``reference`` (float64, correctness
  probes only): which Punica kernels serve LoRA.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

ENV_REGISTRY_URL = "HI_MOE_LORA_REGISTRY_URL"
ENV_RESOLVER_TIMEOUT_S = "HI_MOE_LORA_RESOLVER_TIMEOUT_S"
ENV_KERNELS = "HI_MOE_LORA_KERNELS"
ENV_RESOLVER_TOKEN = "HI_MOE_LORA_RESOLVER_TOKEN"

KernelsChoice = Literal["ours", "vllm", "reference"]
KERNEL_CHOICES: tuple[KernelsChoice, ...] = ("ours", "vllm", "reference")
DEFAULT_RESOLVER_TIMEOUT_S = 10.0


class PluginSettingsError(ValueError):
    """An environment variable of the plugins holds a value that cannot be used."""

    def __init__(self, variable: str, value: str, expected: str) -> None:
        super().__init__(f"{variable}={value!r}: expected {expected}")
        self.variable = variable
        self.value = value


@dataclass(frozen=True)
class PluginSettings:
    """What the vLLM plugins need to know; build it with :meth:`from_env`."""

    registry_url: str | None = None
    resolver_timeout_s: float = DEFAULT_RESOLVER_TIMEOUT_S
    kernels: KernelsChoice = "ours"
    #: Never in ``repr`` (the settings may be logged).
    resolver_token: str | None = field(default=None, repr=False)

    @property
    def resolver_enabled(self) -> bool:
        return self.registry_url is not None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PluginSettings:
        """Read the settings from ``environ`` (default: ``os.environ``).

        Raises :class:`PluginSettingsError` for a malformed value; empty values count as unset.
        """
        env = os.environ if environ is None else environ
        return cls(
            registry_url=_registry_url(env.get(ENV_REGISTRY_URL, "")),
            resolver_timeout_s=_timeout(env.get(ENV_RESOLVER_TIMEOUT_S, "")),
            kernels=_kernels(env.get(ENV_KERNELS, "")),
            resolver_token=env.get(ENV_RESOLVER_TOKEN, "").strip() or None,
        )

    def to_env(self) -> dict[str, str]:
        """These settings as the environment of a vLLM process (what :meth:`from_env` reads)."""
        env = {ENV_RESOLVER_TIMEOUT_S: repr(self.resolver_timeout_s), ENV_KERNELS: self.kernels}
        if self.registry_url is not None:
            env[ENV_REGISTRY_URL] = self.registry_url
        if self.resolver_token is not None:
            env[ENV_RESOLVER_TOKEN] = self.resolver_token
        return env


def _registry_url(raw: str) -> str | None:
    value = raw.strip()
    if not value:
        return None
    if not value.startswith(("http://", "https://")):
        raise PluginSettingsError(ENV_REGISTRY_URL, raw, "an http:// or https:// URL")
    return value.rstrip("/")


def _timeout(raw: str) -> float:
    value = raw.strip()
    if not value:
        return DEFAULT_RESOLVER_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        raise PluginSettingsError(ENV_RESOLVER_TIMEOUT_S, raw, "a number of seconds") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise PluginSettingsError(ENV_RESOLVER_TIMEOUT_S, raw, "a positive number of seconds")
    return seconds


def _kernels(raw: str) -> KernelsChoice:
    value = raw.strip().lower() or "ours"
    if value not in KERNEL_CHOICES:
        raise PluginSettingsError(ENV_KERNELS, raw, ", ".join(KERNEL_CHOICES))
    return value
