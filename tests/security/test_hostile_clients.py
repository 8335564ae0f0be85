"""Clients that must not get in, and must not stop the broker serving others: plain bytes on TLS
listeners, a client certificate from a CA the broker does not trust (and none at all on an mTLS
listener), SCRAM with a wrong nonce or proof, and 10,000 fuzzed SaslHandshake / SaslAuthenticate
frames. After each, a legitimate client still produces and consumes, and the broker's log shows no
handler failure."""

from __future__ import annotations

import asyncio
import random
import struct

import pytest
import scramp
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest
from tests.broker.raw_client import RawClient

from onceflow.client import Consumer, Producer
from onceflow.client.connection import BrokerConnectionError, Connection
from onceflow.client.security import ClientSecurity

pytestmark = pytest.mark.timeout(300)
FUZZ_FRAMES = 10_000


def still_serving(broker, topic: str) -> None:
    """A legitimate client can still write and read."""
    settings = broker.scram()
    producer = Producer(settings)
    try:
        producer.send(topic, b"still here", partition=0).get(30)
    finally:
        producer.close()
    consumer = Consumer(
        topic, config={**settings, "group.id": f"{topic}-check", "auto.offset.reset": "earliest"}
    )
    try:
        values = []
        for _ in range(60):
            values += [r.value for r in consumer.poll(timeout_ms=500)]
            if b"still here" in values:
                break
        assert b"still here" in values
    finally:
        consumer.close()
    log = broker.log_text()
    assert "Traceback" not in log and "failed; closing the connection" not in log


def frame(request, version: int, correlation_id: int = 1) -> bytes:
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id="hostile")
    return bytes(request.encode(header=True, framed=True))


async def closed_without_answer(port: int, data: bytes) -> bool:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        got = await asyncio.wait_for(reader.read(65536), 15)
    except (ConnectionError, OSError):
        got = b""
    finally:
        writer.close()
    return got == b"" or not got.startswith(struct.pack(">i", len(got) - 4))  # TLS alert bytes at most


def test_plain_bytes_to_tls_listeners_are_refused(secure_broker):
    api_versions = frame(ApiVersionsRequest(client_software_name="x", client_software_version="1"), 3)
    for port in (secure_broker.sasl_ssl_port, secure_broker.ssl_port):
        assert asyncio.run(closed_without_answer(port, api_versions))
    still_serving(secure_broker, "hostile-plain-to-tls")


def test_client_certificates_the_broker_does_not_trust_are_refused(secure_broker):
    pki = secure_broker.pki
    rogue = ClientSecurity(
        protocol="SSL",
        ssl_ca_location=str(pki.ca),
        ssl_certificate_location=str(pki.rogue_cert),
        ssl_key_location=str(pki.rogue_key),
    )
    none = ClientSecurity(protocol="SSL", ssl_ca_location=str(pki.ca))

    async def attempt(security) -> None:
        conn = await Connection.open(
            "127.0.0.1", secure_broker.ssl_port, security=security, connect_timeout_s=10
        )
        await conn.close()

    for security in (rogue, none):
        with pytest.raises(BrokerConnectionError):
            asyncio.run(attempt(security))
    # And a client that does not trust the broker's CA refuses the broker.
    stranger = ClientSecurity(protocol="SSL", ssl_ca_location=str(pki.rogue_cert))
    with pytest.raises(BrokerConnectionError, match="not trusted"):
        asyncio.run(attempt(stranger))
    still_serving(secure_broker, "hostile-certificates")


@pytest.mark.parametrize("tamper", ["proof", "nonce"])
def test_scram_with_a_wrong_proof_or_nonce_is_refused(secure_broker, tamper):
    async def exchange() -> int:
        client = await RawClient.connect(secure_broker.sasl_port)
        try:
            assert (await client.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1)).error_code == 0
            scram = scramp.ScramClient(["SCRAM-SHA-512"], "alice", "alice-secret")
            first = await client.request(
                SaslAuthenticateRequest(auth_bytes=scram.get_client_first().encode()), 2
            )
            scram.set_server_first(bytes(first.auth_bytes).decode())
            final = scram.get_client_final()
            if tamper == "proof":
                final = final.rsplit(",p=", 1)[0] + ",p=" + "QUJD" * 22
            else:
                final = final.replace(",r=", ",r=forged", 1)
            answer = await client.request(SaslAuthenticateRequest(auth_bytes=final.encode()), 2)
            assert isinstance(answer, SaslAuthenticateResponse)
            assert await client.is_closed_by_broker()
            return answer.error_code
        finally:
            await client.close()

    assert asyncio.run(exchange()) == 58  # SASL_AUTHENTICATION_FAILED
    still_serving(secure_broker, f"hostile-scram-{tamper}")


def test_password_guessing_is_refused_without_flooding_the_log(secure_broker):
    """Twenty wrong PLAIN passwords: each refused with SASL_AUTHENTICATION_FAILED, and the log gets
    at most a couple of lines about them (counted under ``failed-authentication``), not twenty."""
    guesses = 20

    def failure_lines() -> int:
        return secure_broker.log_text().count("failed authentication from")

    async def guess(password: str) -> int:
        client = await RawClient.connect(secure_broker.sasl_port)
        try:
            assert (await client.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)).error_code == 0
            token = f"\x00carol\x00{password}".encode()
            answer = await client.request(SaslAuthenticateRequest(auth_bytes=token), 2)
            assert await client.is_closed_by_broker()
            return answer.error_code
        finally:
            await client.close()

    before = failure_lines()
    codes = [asyncio.run(guess(f"guess-{n}")) for n in range(guesses)]
    assert codes == [58] * guesses  # SASL_AUTHENTICATION_FAILED
    assert failure_lines() - before <= 2
    still_serving(secure_broker, "hostile-guessing")


def fuzzed_frames(rng: random.Random) -> list[bytes]:
    """One connection's worth (1-5) of SaslHandshake / SaslAuthenticate frames, valid or broken."""
    frames = []
    for _ in range(rng.randint(1, 5)):
        kind = rng.random()
        version = rng.choice([0, 1, 1, 2, 2, 3, 9])
        if kind < 0.35:
            mechanism = rng.choice(
                ["PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256", "GSSAPI", "", "x" * rng.randint(1, 300)]
            )
            data = frame(
                SaslHandshakeRequest(mechanism=mechanism), min(version, 1), rng.randint(0, 2**31 - 1)
            )
        elif kind < 0.8:
            token = rng.choice(
                [
                    rng.randbytes(rng.randint(0, 300)),
                    b"n,,n=alice,r=" + rng.randbytes(rng.randint(0, 40)),
                    b"c=biws,r=abc,p=" + rng.randbytes(rng.randint(0, 80)),
                    b"\x00admin\x00" + rng.randbytes(rng.randint(0, 20)),
                ]
            )
            data = frame(
                SaslAuthenticateRequest(auth_bytes=token), min(version, 2), rng.randint(0, 2**31 - 1)
            )
        else:  # a header claiming SASL with a body that is not one, or garbage with a plausible size
            body = struct.pack(">hhi", rng.choice([17, 36]), version, rng.randint(0, 1000)) + rng.randbytes(
                rng.randint(0, 100)
            )
            data = struct.pack(">i", len(body)) + body
        if rng.random() < 0.05:
            data = data[: rng.randint(1, len(data))]  # cut short
        elif rng.random() < 0.05:
            data = struct.pack(">i", rng.choice([-1, 0, 2**31 - 1, 10**8])) + data[4:]  # a size that lies
        frames.append(data)
    return frames


def test_ten_thousand_fuzzed_sasl_frames_are_refused_and_the_broker_keeps_serving(secure_broker):
    rng = random.Random(20250425)
    batches: list[list[bytes]] = []
    count = 0
    while count < FUZZ_FRAMES:
        batch = fuzzed_frames(rng)
        batches.append(batch)
        count += len(batch)

    async def one(port: int, batch: list[bytes], stats: dict) -> None:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            stats["refused connections"] += 1
            return
        try:
            writer.write(b"".join(batch))
            await writer.drain()
            while await asyncio.wait_for(reader.read(65536), 0.5):
                pass
            stats["closed by broker"] += 1
        except (TimeoutError, ConnectionError, OSError):
            stats["left open"] += 1
        finally:
            writer.close()

    async def fuzz() -> dict:
        stats = {"closed by broker": 0, "left open": 0, "refused connections": 0}
        limit = asyncio.Semaphore(32)

        async def bounded(batch):
            async with limit:
                await one(secure_broker.sasl_port, batch, stats)

        await asyncio.gather(*(bounded(b) for b in batches))
        return stats

    stats = asyncio.run(fuzz())
    assert stats["refused connections"] == 0
    assert stats["closed by broker"] > len(batches) // 2  # most end in a refusal and a close
    assert "failed authentication from 127.0.0.1 on listener SASL_PLAINTEXT" in secure_broker.log_text()
    still_serving(secure_broker, "hostile-fuzz")
