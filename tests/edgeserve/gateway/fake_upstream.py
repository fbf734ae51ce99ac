"""An OpenAI-compatible upstream for the gateway's routing tests: a real process on real HTTP.

It answers chat completions after ``--delay-s``, one request at a time (``--slots``), the rest
waiting; it reports its waiting and running counts in ``/metrics`` with edgeserve's gauge names;
``--status`` makes every completion answer that HTTP status instead (400, 429, 500), its message
quoting the request's text. The reply names the
upstream (``--name``), the model asked for and the largest image it received, so that a test can
see where a request went and what it carried; with ``--echo`` also the request's text (``said``),
streamed in 5-character pieces. ``--record FILE`` appends each request body received to FILE. A real edgeserve server takes tens of seconds of
CPU to start; these tests check routing, for which a plain HTTP upstream is enough.

    python fake_upstream.py --port N --name cloudA [--delay-s 0.05] [--slots 1] [--status 500]
                            [--echo] [--record FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import time

from aiohttp import web
from PIL import Image


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--delay-s", type=float, default=0.02)
    ap.add_argument("--slots", type=int, default=1)
    ap.add_argument("--status", type=int, default=200)
    ap.add_argument("--echo", action="store_true")
    ap.add_argument("--record")
    args = ap.parse_args()
    sem = asyncio.Semaphore(args.slots)
    counts = {"waiting": 0, "running": 0, "served": 0}

    async def chat(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        if args.record:
            with open(args.record, "ab") as f:
                f.write(raw + b"\n")
        doc = json.loads(raw)
        said = " ".join(p.get("text", "") for m in doc["messages"]
                        if isinstance(m.get("content"), list) for p in m["content"])
        if args.status != 200:  # the message echoes the request's text, as some servers do
            return web.json_response(
                {"error": {"message": f"{args.name} says {args.status} to: {said}"}},
                status=args.status)
        counts["waiting"] += 1
        async with sem:
            counts["waiting"] -= 1
            counts["running"] += 1
            try:
                await asyncio.sleep(args.delay_s)
            finally:
                counts["running"] -= 1
        counts["served"] += 1
        widths = []
        for m in doc["messages"]:
            if isinstance(m.get("content"), list):
                for p in m["content"]:
                    if p.get("type") == "image_url":
                        url = p["image_url"]["url"]
                        data = base64.b64decode(url.partition(",")[2])
                        widths.append(Image.open(io.BytesIO(data)).width)
        reply = {"upstream": args.name, "model": doc.get("model"),
                 "image_width": max(widths, default=0)}
        if args.echo:
            reply["said"] = said
        text = json.dumps(reply)
        if doc.get("stream"):
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            pieces = ([text[i:i + 5] for i in range(0, len(text), 5)] if args.echo
                      else [text[: len(text) // 2], text[len(text) // 2:]])
            for piece in pieces:
                chunk = {"id": "x", "object": "chat.completion.chunk", "created": int(time.time()),
                         "model": doc.get("model"),
                         "choices": [{"index": 0, "delta": {"content": piece},
                                      "finish_reason": None}]}
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        return web.json_response({
            "id": "x", "object": "chat.completion", "created": int(time.time()),
            "model": doc.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}})

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": args.name}]})

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=(
            f'edgeserve_queue_depth{{queue="engine_waiting"}} {counts["waiting"]}\n'
            f'edgeserve_queue_depth{{queue="engine_running"}} {counts["running"]}\n'
            f'fake_served_total {counts["served"]}\n'))

    app = web.Application(client_max_size=64 << 20)  # photos as large as a server takes
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    web.run_app(app, host="127.0.0.1", port=args.port, print=lambda *a: print("ready", flush=True))


if __name__ == "__main__":
    main()
