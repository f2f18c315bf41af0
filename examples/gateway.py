"""A streaming gateway: forwards ``POST /v1/responses`` to an upstream server byte for byte, and
taps the same bytes with a :class:`rapidsse.ResponseAccumulator` for logging and billing.

The client gets exactly what the upstream sent (no re-encoding, no added latency beyond one copy);
the accumulator reads each chunk as it passes and creates no Python object per
event. When the stream ends (or the client leaves), the gateway logs the response id, status,
usage and output length, and calls ``on_complete`` (e.g. to bill the tokens).

Run it (needs starlette, uvicorn and httpx) against a local replay of a recording::

    rapidsse serve corpus/responses/some.sse --port 8000 &
    UPSTREAM_URL=http://127.0.0.1:8000/v1/responses python examples/gateway.py   # listens on :8080
    curl -N http://127.0.0.1:8080/v1/responses -d '{"stream": true}'

(or ``uvicorn examples.gateway:app``, with your own logging configuration).

The upstream is asked for an uncompressed body (``Accept-Encoding: identity``), so the raw bytes
forwarded are the SSE text the accumulator reads.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from rapidsse import ResponseAccumulator

logger = logging.getLogger("rapidsse.gateway")

#: Request headers passed upstream (the rest, e.g. cookies and hop-by-hop headers, are not).
FORWARDED_REQUEST_HEADERS = ("authorization", "content-type", "openai-organization", "openai-project", "openai-beta")
#: Response headers not passed back: hop-by-hop ones, and those the ASGI server sets itself.
DROPPED_RESPONSE_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding",
                            "date", "server"}

OnComplete = Callable[[ResponseAccumulator], Any]


def log_usage(accumulator: ResponseAccumulator) -> None:
    """The default ``on_complete``: one log line per streamed response."""
    response = accumulator.response
    usage = response.usage if response is not None else None
    logger.info(
        "response %s: status=%s output_text=%d chars, input_tokens=%s output_tokens=%s, %d events",
        response.id if response is not None else None,
        response.status if response is not None else None,
        len(accumulator.output_text),
        usage.input_tokens if usage is not None else None,
        usage.output_tokens if usage is not None else None,
        accumulator.events,
    )


def create_app(upstream_url: str, *, on_complete: OnComplete = log_usage, timeout: float = 300.0) -> Starlette:
    """The gateway app, proxying ``POST /v1/responses`` to ``upstream_url`` (a full endpoint URL)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0)) as client:
            app.state.client = client
            yield

    async def responses(request: Request) -> Response:
        client: httpx.AsyncClient = request.app.state.client
        headers = {name: value for name in FORWARDED_REQUEST_HEADERS if (value := request.headers.get(name))}
        headers["accept-encoding"] = "identity"
        upstream_request = client.build_request("POST", upstream_url, content=await request.body(), headers=headers)
        try:
            upstream = await client.send(upstream_request, stream=True)
        except httpx.HTTPError as exc:
            logger.warning("upstream %s unreachable: %s", upstream_url, exc)
            error = {"error": {"message": "the upstream server is unreachable", "type": "bad_gateway"}}
            return JSONResponse(error, status_code=502)
        is_stream = upstream.headers.get("content-type", "").startswith("text/event-stream")

        async def relay() -> AsyncIterator[bytes]:
            accumulator = ResponseAccumulator(on_error="skip")
            try:
                async for chunk in upstream.aiter_raw():
                    if is_stream:
                        accumulator.feed(chunk)
                    yield chunk
            finally:
                await upstream.aclose()
                if is_stream:
                    accumulator.close()
                    on_complete(accumulator)

        passed = {k: v for k, v in upstream.headers.items() if k.lower() not in DROPPED_RESPONSE_HEADERS}
        return StreamingResponse(relay(), status_code=upstream.status_code, headers=passed)

    return Starlette(routes=[Route("/v1/responses", responses, methods=["POST"])], lifespan=lifespan)


app = create_app(os.environ.get("UPSTREAM_URL", "http://127.0.0.1:8000/v1/responses"))


if __name__ == "__main__":
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8080")))
