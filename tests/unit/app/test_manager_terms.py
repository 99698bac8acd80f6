"""Each term of leadership starts the controllers afresh: a reconciler's memory of its last
term is let go before the first reconcile of the next (another leader may have written
status in between)."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from linkerd_config.kube.controller import Controller, ControllerOptions
from linkerd_config.manager import Manager
from tests.support.leadership_fakes import Toggled
from tests.support.manager_fakes import Journal
from tests.support.waiting import eventually


async def test_each_term_lets_go_of_the_last_before_its_first_reconcile() -> None:
    leadership = Toggled()
    manager = Manager(leadership, shutdown_grace=5.0)
    journal = Journal()
    controller = Controller(
        "test", journal, options=ControllerOptions(workers=1), registry=CollectorRegistry()
    )
    manager.add_controller(controller, lambda: ["k"], journal.new_term)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))

    async def reconciled(times: int) -> bool:
        return journal.said.count("reconcile k") == times

    try:
        await eventually(lambda: reconciled(1), timeout=10, what="the first term's reconcile")
        leadership.lose()

        async def stopped() -> bool:
            return not manager.leading

        await eventually(stopped, timeout=10, what="the controllers stop")
        assert journal.said == ["new term", "reconcile k"]
        leadership.gain()
        await eventually(lambda: reconciled(2), timeout=10, what="the second term's reconcile")
        assert journal.said == ["new term", "reconcile k", "new term", "reconcile k"]
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
