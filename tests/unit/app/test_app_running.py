"""``app.running`` (the tests' and the demo's way to run the app) closes the client even when
the manager's stop hangs past its bound, and says so by raising."""

from __future__ import annotations

import pytest

from linkerd_config.app import running
from tests.support.manager_fakes import ClosingClient, HungManager, app_of


async def test_a_hung_stop_is_cut_short_and_the_client_still_closed() -> None:
    client = ClosingClient()
    with pytest.raises(TimeoutError):
        async with running(app_of(HungManager(), client)):
            pass
    assert client.closed
