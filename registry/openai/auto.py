"""``model="auto"``: the front door asks the dispatcher which specialist serves a request.

The objective is the last user message of a chat request (its text parts joined) or the prompt
of a completion; context references come in the optional ``dispatch`` body field
(``{"dispatch": {"context_refs": [...]}}``, the ``openai`` client's ``extra_body``), which is
removed before the request goes to vLLM. The chosen specialist's version is then picked like
for a request naming it (A/B split); with no confident match the base model serves it. The
answer's headers say who served it and why.
"""

from __future__ import annotations

from typing import Any

from registry.dispatch import Decision
from registry.openai.bodies import MAX_OBJECTIVE_CHARS, DispatchHintIn, validated
from registry.openai.errors import InvalidRequest
from registry.openai.targets import Target

AUTO = "auto"
#: The field of a completion request body that carries dispatch hints (removed before vLLM).
HINT_FIELD = "dispatch"
DISPATCH_TIER_HEADER = "X-HiMoE-Dispatch-Tier"
SPECIALIST_HEADER = "X-HiMoE-Specialist"
FALLBACK_HEADER = "X-HiMoE-Fallback-Reason"


def take_hints(body: dict[str, Any]) -> tuple[str, ...]:
    """Remove the ``dispatch`` field from ``body``; its validated ``context_refs``."""
    if HINT_FIELD not in body:
        return ()
    hint = validated(DispatchHintIn, body.pop(HINT_FIELD), prefix=f"{HINT_FIELD}.")
    return tuple(hint.context_refs)


def objective_of(body: dict[str, Any], prompt_field: str) -> str:
    """What the task says: the last user message (chat) or the prompt (completions).

    Only the first :data:`MAX_OBJECTIVE_CHARS` characters decide: a long request is served,
    not refused, and its opening says what it is about.
    """
    if prompt_field == "messages":
        text = _last_user_text(body["messages"])
    else:
        prompt = body["prompt"]
        text = prompt[0] if isinstance(prompt, list) and prompt else prompt
        if not isinstance(text, str):
            raise InvalidRequest(
                "model 'auto' needs a text prompt (token ids cannot be dispatched)",
                param="prompt",
            )
    if not text.strip():
        raise InvalidRequest(f"model 'auto' needs a non-empty {prompt_field}", param=prompt_field)
    return text[:MAX_OBJECTIVE_CHARS]


def _last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            parts = [
                part["text"]
                for part in content
                if isinstance(part, dict)
                and part.get("type") == "text"
                and isinstance(part.get("text"), str)
            ]
            return "\n".join(parts)
    raise InvalidRequest("model 'auto' needs a user message with text", param="messages")


def decision_headers(decision: Decision) -> dict[str, str]:
    headers = {
        DISPATCH_TIER_HEADER: decision.tier,
        SPECIALIST_HEADER: decision.specialist or "none",
    }
    if decision.fallback_reason:
        headers[FALLBACK_HEADER] = decision.fallback_reason[:200]
    return headers


def dry_run_answer(decision: Decision, target: Target) -> dict[str, Any]:
    """``POST /v1/dispatch``'s answer for one task."""
    return {
        "specialist": decision.specialist,
        "version": target.version,
        "model": target.served_name,
        "tier": decision.tier,
        "domains": list(decision.domains),
        "scores": dict(decision.scores),
        "signals": [
            {"tier": s.tier, "domain": s.domain, "term": s.term, "weight": s.weight}
            for s in decision.signals
        ],
        "fallback_reason": decision.fallback_reason,
    }
