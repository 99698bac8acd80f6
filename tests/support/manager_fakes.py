"""Fakes for the manager's and the app's unit tests: a reconciler that writes down its terms,
a manager whose stop hangs, a client that says whether it was closed."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, cast

from linkerd_config.app import App
from linkerd_config.kube.controller import Result


class Journal:
    """A reconciler that writes down its reconciles and the terms they ran in."""

    def __init__(self) -> None:
        self.said: list[str] = []

    async def reconcile(self, key: str) -> Result:
        self.said.append(f"reconcile {key}")
        return Result()

    def new_term(self) -> None:
        self.said.append("new term")


class HungManager:
    """A manager whose stop never finishes; ``shutdown_grace`` bounds ``running``'s wait at
    ``grace + 10`` seconds, so -9.9 makes it 0.1."""

    shutdown_grace = -9.9

    async def run(self, stop: asyncio.Event) -> None:
        await stop.wait()
        await asyncio.Event().wait()


class ClosingClient:
    closed = False

    async def close(self) -> None:
        self.closed = True


@dataclass
class _Parts:
    manager: Any
    client: Any


def app_of(manager: Any, client: Any) -> App:
    """An App with only what ``running`` uses."""
    return cast(App, _Parts(manager, client))
