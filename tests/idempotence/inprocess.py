"""An in-process broker on its own event-loop thread, so a synchronous test can switch its fault points
between requests (``broker.faults.set(name, 1.0)`` ... ``broker.faults.clear()``)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from onceflow.broker.config import BrokerConfig
from onceflow.server.node import single_node


class ThreadedBroker:
    def __init__(self, data_dir: Path) -> None:
        self.broker = single_node(BrokerConfig(port=0, data_dir=data_dir))
        self._loop = asyncio.new_event_loop()
        self._stopped = asyncio.Event()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="broker", daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            await self.broker.start()
            self._started.set()
            try:
                await self._stopped.wait()
            finally:
                await self.broker.stop()

        self._loop.run_until_complete(main())
        self._loop.close()

    def start(self) -> ThreadedBroker:
        self._thread.start()
        if not self._started.wait(30):
            raise RuntimeError("the in-process broker did not start within 30 s")
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(30)

    @property
    def faults(self):
        return self.broker.faults

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker.port}"
