"""A blocking client of the control plane's admin API (``urllib``; run it off an event loop).

Every caller of the admin API goes through :class:`ControlPlaneClient`: the resolver plugin (on
each vLLM host, inside every vLLM process, so the standard library only), the CLI and the demo.
It owns the paths (:mod:`.paths`), the error shapes (RFC 9457 problems of the admin API and
OpenAI-style errors of ``/v1`` both become :class:`ControlPlaneError` with their ``code``) and
the answers code reads
(:class:`.answers.ResolvedAdapter`); other answers come back as the JSON objects the admin API
documents. A warm-up can also be followed as it happens (:meth:`ControlPlaneClient.warmup_events`:
the admin API's NDJSON lines, read one by one), and so can a registration
(:meth:`ControlPlaneClient.register_events`: bytes fetched, then the outcome).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Generator, Iterator, Mapping, Sequence
from http.client import HTTPException, HTTPResponse
from typing import Any

from hi_moe_lora.control_api import paths
from hi_moe_lora.control_api.answers import ResolvedAdapter

#: Answers larger than this are refused (the largest real one, a listing, is far smaller).
MAX_ANSWER_BYTES = 64 << 20
#: One line of a streamed (NDJSON) answer larger than this is refused (a result is < 1 KiB).
MAX_EVENT_BYTES = 1 << 20
JsonObject = dict[str, Any]


class ControlPlaneError(Exception):
    """The control plane answered an error, or something that is not the documented answer."""

    def __init__(
        self,
        detail: str,
        *,
        status: int | None = None,
        code: str | None = None,
        title: str | None = None,
    ) -> None:
        self.detail = detail
        self.status = status
        self.code = code
        self.title = title
        super().__init__(self._message())

    def _message(self) -> str:
        if self.code is not None:
            return f"{self.title or 'Error'} ({self.code}): {self.detail}"
        if self.status is not None:
            return f"HTTP {self.status}: {self.detail}"
        return self.detail


class NotFound(ControlPlaneError):
    """HTTP 404: no such adapter or version (``code`` says which)."""


class ControlPlaneUnreachable(ControlPlaneError):
    """No answer at all: refused, timed out, or the connection broke."""


class ControlPlaneClient:
    """The admin API at ``base_url`` (e.g. ``http://control-plane:8080``)."""

    def __init__(self, base_url: str, *, timeout_s: float, token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._token = token

    def url(self, template: str, **params: str) -> str:
        """The admin API's ``template`` with ``params`` filled in, as an absolute URL."""
        return self.base_url + paths.admin_path(template, **params)

    # ------------------------------------------------------------------ calls

    def resolve(self, served_name: str) -> ResolvedAdapter:
        """What vLLM should load for ``name`` (active version) or ``name@version``."""
        return ResolvedAdapter.from_json(self._call("GET", paths.RESOLVE, served_name=served_name))

    def register(
        self,
        name: str,
        version: str,
        source: str,
        *,
        domains: Sequence[str] = (),
        description: str | None = None,
    ) -> JsonObject:
        body = {
            "version": version,
            "source": source,
            "domains": list(domains),
            "description": description,
        }
        return self._object(self._call("POST", paths.VERSIONS, body, name=name))

    def register_events(
        self,
        name: str,
        version: str,
        source: str,
        *,
        domains: Sequence[str] = (),
        description: str | None = None,
    ) -> Generator[JsonObject, None, None]:
        """The same registration, followed as it happens: ``progress`` events (``bytes``,
        ``total``: ``None`` while unknown) while the files are fetched or copied, then one
        ``registered`` event whose ``version`` is what :meth:`register` returns.

        A refusal raises :class:`ControlPlaneError` (its subclasses), whether the control plane
        answered it at once or as the stream's ``error`` line; so does a stream that ends
        without its outcome. A control plane that answers plain JSON (no stream) yields the one
        ``registered`` event.
        """
        body = {
            "version": version,
            "source": source,
            "domains": list(domains),
            "description": description,
        }
        request = self._request("POST", self.url(paths.VERSIONS, name=name), body)
        request.add_header("Accept", f"{paths.NDJSON}, application/json;q=0.5")
        with self._open(request) as response:
            content_type = response.headers.get("Content-Type", "")
            if paths.NDJSON not in content_type:
                raw = self._read(response, MAX_ANSWER_BYTES + 1)
                try:
                    answer = json.loads(raw)
                except ValueError:
                    raise ControlPlaneError("answer is not JSON") from None
                yield {"event": "registered", "version": self._object(answer)}
                return
            for event in self._lines(response):
                kind = event.get("event")
                if kind == "error":
                    problem = event.get("problem")
                    raise _problem_error(problem if isinstance(problem, Mapping) else {}, None)
                yield event
                if kind == "registered":
                    return
            raise ControlPlaneUnreachable(
                f"the registration stream from {self.base_url} ended before its outcome"
            )

    def list_adapters(self) -> list[JsonObject]:
        adapters = self._object(self._call("GET", paths.ADAPTERS)).get("adapters")
        if not isinstance(adapters, list):
            raise ControlPlaneError("adapter listing lacks 'adapters'")
        return adapters

    def get_adapter(self, name: str) -> JsonObject:
        return self._object(self._call("GET", paths.ADAPTER, name=name))

    def promote(self, name: str, version: str) -> JsonObject:
        return self._object(self._call("POST", paths.PROMOTE, name=name, version=version))

    def rollback(self, name: str) -> JsonObject:
        return self._object(self._call("POST", paths.ROLLBACK, name=name))

    def delete(self, name: str, version: str) -> None:
        self._call("DELETE", paths.VERSION, name=name, version=version)

    def set_traffic(self, name: str, weights: Mapping[str, float]) -> JsonObject:
        body = {"weights": dict(weights)}
        return self._object(self._call("PUT", paths.TRAFFIC, body, name=name))

    def set_dispatch_hints(
        self, name: str, *, keywords: Sequence[str], exemplars: Sequence[str]
    ) -> JsonObject:
        body = {"keywords": list(keywords), "exemplars": list(exemplars)}
        return self._object(self._call("PUT", paths.DISPATCH_HINTS, body, name=name))

    def routing_gaps(
        self, *, limit: int = 50, offset: int = 0, since: str | None = None
    ) -> JsonObject:
        query = {"limit": str(limit), "offset": str(offset)}
        if since is not None:
            query["since"] = since
        return self._object(self._call("GET", paths.ROUTING_GAPS, query=query))

    def routing_gap_summary(self, *, top: int = 20, since: str | None = None) -> JsonObject:
        query = {"top": str(top)}
        if since is not None:
            query["since"] = since
        return self._object(self._call("GET", paths.ROUTING_GAP_SUMMARY, query=query))

    # ------------------------------------------------------------------ access

    def create_token(self, name: str, scope: str) -> JsonObject:
        """A new token; its secret (``token``) is in this answer only."""
        body = {"name": name, "scope": scope}
        return self._object(self._call("POST", paths.TOKENS, body))

    def list_tokens(self) -> list[JsonObject]:
        tokens = self._object(self._call("GET", paths.TOKENS)).get("tokens")
        if not isinstance(tokens, list):
            raise ControlPlaneError("token listing lacks 'tokens'")
        return tokens

    def revoke_token(self, name: str) -> JsonObject:
        return self._object(self._call("DELETE", paths.TOKEN, name=name))

    def audit(
        self,
        *,
        limit: int = 100,
        before_id: int | None = None,
        adapter: str | None = None,
        actor: str | None = None,
        action: str | None = None,
        since: str | None = None,
    ) -> JsonObject:
        """``GET /admin/v1/audit``: events newest first; ``next_before_id`` pages back."""
        query = {"limit": str(limit)}
        for key, value in (
            ("before_id", None if before_id is None else str(before_id)),
            ("adapter", adapter),
            ("actor", actor),
            ("action", action),
            ("since", since),
        ):
            if value is not None:
                query[key] = value
        return self._object(self._call("GET", paths.AUDIT, query=query))

    def access(self) -> JsonObject:
        """``GET /admin/v1/access``: whether access control is on (``open`` otherwise)."""
        return self._object(self._call("GET", paths.ACCESS))

    # ------------------------------------------------------------------ warm-up

    def warmup(self, adapters: Sequence[str] | None = None) -> JsonObject:
        """``POST /admin/v1/warmup``: warm ``adapters`` (names or ``name@version``; ``None``: the
        control plane's plan) on every upstream and return the whole report once it is done."""
        return self._object(self._call("POST", paths.WARMUP, _warmup_body(adapters)))

    def warmup_events(
        self, adapters: Sequence[str] | None = None
    ) -> Generator[JsonObject, None, None]:
        """The same warm-up, as its events arrive: ``plan``, one ``result`` per version and
        upstream, then ``done``.

        Nothing is sent before the first ``next()``; ``close()`` closes the connection (the run
        itself goes on on the control plane). Errors (an unknown adapter, an unreachable control
        plane, a stream that breaks off before ``done``) raise from the iteration as
        :class:`ControlPlaneError` and its subclasses, like every other call.
        """
        request = self._request("POST", self.url(paths.WARMUP), _warmup_body(adapters))
        request.add_header("Accept", paths.NDJSON)
        with self._open(request) as response:
            content_type = response.headers.get("Content-Type", "")
            if paths.NDJSON not in content_type:
                raise ControlPlaneError(f"answer is not {paths.NDJSON}: {content_type or '?'}")
            last: object = None
            for event in self._lines(response):
                last = event.get("event")
                yield event
            if last != "done":
                raise ControlPlaneUnreachable(
                    f"the warm-up stream from {self.base_url} ended before its 'done' event"
                )

    def last_warmup(self) -> JsonObject:
        """``GET /admin/v1/warmup``: the last warm-up's report (:class:`NotFound` before any)."""
        return self._object(self._call("GET", paths.WARMUP))

    # ------------------------------------------------------------------ the front door's own

    def dispatch(self, objective: str, context_refs: Sequence[str] = ()) -> JsonObject:
        """``POST /v1/dispatch``: which specialist would serve ``objective`` (a dry run)."""
        body = {"objective": objective, "context_refs": list(context_refs)}
        return self._object(self._call("POST", paths.V1_DISPATCH, body, admin=False))

    def dispatch_batch(self, tasks: Sequence[tuple[str, Sequence[str]]]) -> JsonObject:
        """``POST /v1/dispatch/batch``: decisions for (objective, context refs) pairs, grouped."""
        body = {"tasks": [{"objective": o, "context_refs": list(refs)} for o, refs in tasks]}
        return self._object(self._call("POST", paths.V1_DISPATCH_BATCH, body, admin=False))

    def feedback(self, request_id: str, success: bool) -> JsonObject:
        body = {"request_id": request_id, "success": success}
        return self._object(self._call("POST", paths.V1_FEEDBACK, body, admin=False))

    def health(self) -> JsonObject:
        """``GET /v1/health``: every upstream and served version as the last probes saw them."""
        return self._object(self._call("GET", paths.V1_HEALTH, admin=False))

    # ------------------------------------------------------------------ transport

    @staticmethod
    def _object(answer: Any) -> JsonObject:
        if not isinstance(answer, dict):
            raise ControlPlaneError("answer is not a JSON object")
        return answer

    def _call(
        self,
        method: str,
        template: str,
        body: Any = None,
        *,
        admin: bool = True,
        query: Mapping[str, str] | None = None,
        **params: str,
    ) -> Any:
        url = self.url(template, **params) if admin else self.base_url + template
        if query:
            url += "?" + urllib.parse.urlencode(query)
        request = self._request(method, url, body)
        request.add_header("Accept", "application/json")
        with self._open(request) as response:
            raw = self._read(response, MAX_ANSWER_BYTES + 1)
        if len(raw) > MAX_ANSWER_BYTES:
            raise ControlPlaneError("answer too large")
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ControlPlaneError("answer is not JSON") from None

    def _request(self, method: str, url: str, body: Any = None) -> urllib.request.Request:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self._token:
            request.add_header("Authorization", f"Bearer {self._token}")
        return request

    def _open(self, request: urllib.request.Request) -> HTTPResponse:
        """The answer to ``request``; an error answer raised as :class:`ControlPlaneError`."""
        try:
            response: HTTPResponse = urllib.request.urlopen(request, timeout=self._timeout_s)
        except urllib.error.HTTPError as exc:
            raise _problem(exc) from None
        except (urllib.error.URLError, OSError, ValueError, HTTPException) as exc:
            raise self._unreachable(exc) from None
        return response

    def _read(self, response: HTTPResponse, limit: int, *, line: bool = False) -> bytes:
        """Up to ``limit`` bytes (or one line) of ``response``; a broken connection raised."""
        try:
            return response.readline(limit) if line else response.read(limit)
        except (OSError, ValueError, HTTPException) as exc:  # reset, timeout, IncompleteRead
            raise self._unreachable(exc) from None

    def _lines(self, response: HTTPResponse) -> Iterator[JsonObject]:
        """The JSON objects of an NDJSON answer, one per line, as they arrive."""
        while True:
            raw = self._read(response, MAX_EVENT_BYTES + 1, line=True)
            if not raw:
                return
            if len(raw) > MAX_EVENT_BYTES:
                raise ControlPlaneError("streamed event too large")
            if not raw.strip():
                continue
            try:
                event = json.loads(raw)
            except ValueError:
                raise ControlPlaneError("streamed line is not JSON") from None
            yield self._object(event)

    def _unreachable(self, exc: BaseException) -> ControlPlaneUnreachable:
        # URLError wraps refused connections; TimeoutError/OSError the socket-level ones.
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return ControlPlaneUnreachable(
            f"cannot reach the control plane at {self.base_url}: {type(reason).__name__}: {reason}"
        )


def _warmup_body(adapters: Sequence[str] | None) -> JsonObject:
    return {} if adapters is None else {"adapters": list(adapters)}


def _problem(exc: urllib.error.HTTPError) -> ControlPlaneError:
    """An HTTP error answer as :class:`ControlPlaneError` (RFC 9457 problem if it is one)."""
    try:
        text = exc.read(4096).decode("utf-8", "replace")
    except OSError:
        text = ""
    finally:
        exc.close()
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if not isinstance(payload, Mapping):
        error = NotFound if exc.code == 404 else ControlPlaneError
        return error(text.strip()[:500] or str(exc.reason), status=exc.code)
    return _problem_error(payload, exc.code, text)


def _problem_error(
    payload: Mapping[str, Any], status: int | None, text: str = ""
) -> ControlPlaneError:
    """A problem (RFC 9457) or OpenAI-style error body as :class:`ControlPlaneError`;
    ``status``: the HTTP status (``None``: the problem's own, e.g. a streamed error line)."""
    if status is None:
        own = payload.get("status")
        status = own if isinstance(own, int) else None
    error = NotFound if status == 404 else ControlPlaneError
    openai_error = payload.get("error")
    if isinstance(openai_error, Mapping):  # the front door's /v1 answers OpenAI's error shape
        payload = {
            "detail": openai_error.get("message"),
            "code": openai_error.get("code"),
            "title": openai_error.get("type"),
        }
    detail = str(payload.get("detail") or payload.get("title") or text.strip()[:500])
    code = payload.get("code")
    title = payload.get("title")
    return error(
        detail,
        status=status,
        code=str(code) if code else None,
        title=str(title) if title else None,
    )
