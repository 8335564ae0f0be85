"""The broker accepts connections only after its coordinators have loaded (until then it is bound
but not listening: clients see a refused connection, as while the broker is down).

Before, the listener served while ``__consumer_offsets`` and ``__transaction_state`` were being
replayed: a request in that window met no services at all (the connection was dropped) or no
transaction coordinator, and then Produce skipped its KIP-890 check and TxnOffsetCommit its
transaction check. Clients reconnect within milliseconds of a restart, so the window was hit.
"""

from __future__ import annotations

import asyncio
import struct

from onceflow.broker.config import BrokerConfig
from onceflow.broker.txn.service import TransactionService
from onceflow.server.node import single_node


def _api_versions_v0(correlation_id: int) -> bytes:
    client_id = b"start-order-test"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


async def _exchange(port: int) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(_api_versions_v0(7))
        await writer.drain()
        size, correlation_id = struct.unpack(">ii", await reader.readexactly(8))
        await reader.readexactly(size - 4)
        return correlation_id
    finally:
        writer.close()


def test_requests_wait_until_the_transaction_coordinator_has_loaded(tmp_path, monkeypatch):
    released = asyncio.Event()
    original_start = TransactionService.start

    async def slow_start(self):
        await released.wait()
        await original_start(self)

    monkeypatch.setattr(TransactionService, "start", slow_start)

    async def scenario() -> None:
        broker = single_node(BrokerConfig(port=0, data_dir=tmp_path))
        starting = asyncio.create_task(broker.start())
        while broker.port == 0:  # bound (the port is known) but still loading
            await asyncio.sleep(0.01)
        early = asyncio.create_task(_exchange(broker.port))
        await asyncio.wait({early}, timeout=0.3)
        # Not listening yet (refused, as if the broker were still down), or at least not answering.
        assert not early.done() or isinstance(early.exception(), ConnectionRefusedError)
        early.cancel()
        released.set()
        await starting
        assert await asyncio.wait_for(_exchange(broker.port), 10) == 7
        assert broker.services is not None and broker.services.transactions is not None
        await broker.stop()

    asyncio.run(scenario())
