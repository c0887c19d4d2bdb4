"""Scopes a token grants, and the caller a request was admitted as.

``admin`` grants everything; ``resolver`` only the resolver's look-up (what vLLM hosts hold);
``inference`` the front door ``/v1/*`` (API keys); ``metrics`` ``/metrics`` and the health
picture when those are closed. ``_anonymous`` is the caller while access is open (or on a surface
left public), ``_system`` the actor of work nobody asked for through the API.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

Scope = Literal["admin", "resolver", "inference", "metrics"]
SCOPES: tuple[Scope, ...] = get_args(Scope)

ANONYMOUS = "_anonymous"
SYSTEM = "_system"


def grants(held: Scope, needed: Scope) -> bool:
    """Whether a token of scope ``held`` may call what needs ``needed`` (admin: everything)."""
    return held == "admin" or held == needed


@dataclass(frozen=True)
class Caller:
    """Who a request was admitted as: a token's name and scope, or anonymous (scope ``None``)."""

    name: str
    scope: Scope | None = None

    @property
    def anonymous(self) -> bool:
        return self.scope is None


ANONYMOUS_CALLER = Caller(ANONYMOUS)
