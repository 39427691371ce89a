"""A benchmark-only server extension: a 10 ms ticker on the server's event loop
that records the longest lag (how late a tick ran: the loop was blocked, or
the process was not scheduled). ``GET /bench-loop-ticker`` answers the
longest lag in seconds since the last call and starts a new window.

Enabled by ``bench/run.py`` with
``c.ServerApp.jpserver_extensions = {"bench.loop_ticker": True}``; never part
of the product.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from tornado import web

TICK = 0.01


class Ticker:
    def __init__(self) -> None:
        self.worst = 0.0
        self.ticks = 0
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        while True:
            due = time.monotonic() + TICK
            await asyncio.sleep(TICK)
            self.worst = max(self.worst, time.monotonic() - due)
            self.ticks += 1

    def take(self) -> dict[str, Any]:
        answer = {"max_lag": self.worst, "ticks": self.ticks}
        self.worst, self.ticks = 0.0, 0
        return answer


TICKER = Ticker()


class TickerHandler(web.RequestHandler):
    def get(self) -> None:
        if TICKER.task is None:
            TICKER.task = asyncio.ensure_future(TICKER.run())
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(TICKER.take()))


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": "bench.loop_ticker"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    serverapp.web_app.add_handlers(".*$", [(r"/bench-loop-ticker", TickerHandler)])
