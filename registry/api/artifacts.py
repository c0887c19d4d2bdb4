"""Artifact API ``/admin/v1/artifacts/{name}/{version}/{file}``: a version's files, for vLLM hosts.

A vLLM host that shares no file system with the control plane downloads the files of a version
it has not got (``adapter_config.json`` and ``adapter_model.safetensors``; any other name is a
404) and verifies the version's sha256 itself. ``GET`` streams one file with ``Content-Length``
and a strong ``ETag``; ``Range: bytes=a-b`` (one range; ``a-`` and ``-n`` too) answers 206 with
``Content-Range`` so a broken download resumes, an unsatisfiable range 416 (problem+json,
``Content-Range: bytes */size``), and ``If-Range`` with another ETag the whole file. ``HEAD``
answers the same headers without a body.

The file is found through :meth:`AdapterService.artifact_file` (the registered version's path),
never built from the URL. Callers: the resolver's token or an admin token (``ResolverCaller``),
like the resolve look-up; the admission limit does not apply (vLLM waits on it).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator
from typing import BinaryIO

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from hi_moe_lora.control_api import paths
from registry.api.problems import PROBLEM_JSON, PROBLEM_TYPE_BASE, problem_response
from registry.api.schemas import Problem
from registry.dependencies import AdaptersDep as Adapters
from registry.dependencies import ResolverCaller

CHUNK_BYTES = 1 << 20
OCTET_STREAM = "application/octet-stream"
_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", re.IGNORECASE)

_problem = {"model": Problem, "content": {PROBLEM_JSON: {}}}
router = APIRouter(
    prefix=paths.ADMIN_PREFIX,
    tags=["artifacts"],
    responses={401: _problem, 403: _problem, 404: _problem, 416: _problem},
)


def parse_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """The inclusive byte range ``header`` asks of a file of ``size`` bytes.

    ``None``: serve the whole file (no header, or one this endpoint ignores as RFC 9110 allows:
    another unit, several ranges, bad syntax). ``"unsatisfiable"``: answer 416.
    """
    if header is None:
        return None
    match = _RANGE.match(header)
    if match is None:
        return None
    first, last = match.group(1), match.group(2)
    if not first and not last:
        return None
    if not first:  # the last n bytes
        suffix = int(last)
        if suffix == 0 or size == 0:
            return "unsatisfiable"
        return max(size - suffix, 0), size - 1
    start = int(first)
    end = int(last) if last else size - 1
    if last and end < start:
        return None  # invalid: ignored
    if start >= size:
        return "unsatisfiable"
    return start, min(end, size - 1)


def _etag(sha256: str, file: str) -> str:
    # A version's files never change while it exists, and its sha256 covers them: the same tag
    # on every control-plane replica.
    return f'"{sha256}-{file}"'


def _chunks(handle: BinaryIO, start: int, length: int) -> Iterator[bytes]:
    try:
        handle.seek(start)
        left = length
        while left > 0:
            chunk = handle.read(min(CHUNK_BYTES, left))
            if not chunk:  # the file shrank under us: end short, the client sees the size differ
                return
            left -= len(chunk)
            yield chunk
    finally:
        handle.close()


@router.api_route(paths.ARTIFACT, methods=["GET", "HEAD"], response_class=Response)
async def artifact(
    name: str, version: str, file: str, request: Request, _: ResolverCaller, adapters: Adapters
) -> Response:
    path, sha256 = await adapters.artifact_file(name, version, file)
    # open now: a deletion of the version after this point does not cut the answer short
    handle: BinaryIO | None = await asyncio.to_thread(path.open, "rb")
    assert handle is not None
    try:
        size = os.fstat(handle.fileno()).st_size
        etag = _etag(sha256, path.name)
        headers = {"ETag": etag, "Accept-Ranges": "bytes", "Cache-Control": "no-store"}
        wanted = parse_range(request.headers.get("range"), size)
        if_range = request.headers.get("if-range")
        if if_range is not None and if_range.strip() != etag:
            wanted = None  # the client's partial copy is of something else: send it all
        if wanted == "unsatisfiable":
            problem = Problem(
                type=PROBLEM_TYPE_BASE + "range_not_satisfiable",
                title="Range Not Satisfiable",
                status=416,
                detail=f"{file} of {name}@{version} has {size} bytes",
                code="range_not_satisfiable",
            )
            return problem_response(problem, {**headers, "Content-Range": f"bytes */{size}"})
        status = 200
        start, length = 0, size
        if isinstance(wanted, tuple):
            status = 206
            start, length = wanted[0], wanted[1] - wanted[0] + 1
            headers["Content-Range"] = f"bytes {wanted[0]}-{wanted[1]}/{size}"
        headers["Content-Length"] = str(length)
        if request.method == "HEAD":
            return Response(status_code=status, headers=headers, media_type=OCTET_STREAM)
        stream = _chunks(handle, start, length)
        handle = None  # the stream closes it
        return StreamingResponse(
            stream, status_code=status, headers=headers, media_type=OCTET_STREAM
        )
    finally:
        if handle is not None:
            handle.close()
