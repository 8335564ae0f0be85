"""The floor under a broker's TLS receive path: receiver CPU per GB for 1 MB frames over loopback.

    python bench/tls_receive.py [--quick] [--frames N] [--rounds R]

A sender process writes N frames of 1 MB over one loopback TCP connection; the receiver (this process,
blocking reads, no event loop, no broker) reads them into one reused 1 MB buffer, as a broker reads a
Produce frame, three ways, interleaved:

- ``plain``: ``recv_into`` the frame (the kernel's copy and the syscalls: the plaintext floor);
- ``memory_bio``: asyncio's and uvloop's TLS design: ``recv_into`` a 256 KiB buffer, ``MemoryBIO.write``,
  ``SSLObject.read`` into the frame (the bytes cross the BIO and OpenSSL's record buffer first);
- ``ssl_socket``: OpenSSL reading the socket itself (``ssl.SSLSocket.recv_into``): no memory BIO, but
  two reads of the socket per TLS record (its header, then its body) and at most one record per call.

Also ``aes_gcm_decrypt``: AES-256-GCM alone over 16 KiB records (``cryptography``), the cipher's own
cost. The TLS version and cipher are what a default OpenSSL client and our server context agree on
(TLS 1.3, TLS_AES_256_GCM_SHA384 on this machine's OpenSSL).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import socket
import ssl
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, median, progress  # noqa: E402
from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: E402
from tests.helpers.certs import make_pki  # noqa: E402

FRAME_BYTES = 1 << 20
FULL = {"frames": 300, "rounds": 3}
QUICK = {"frames": 100, "rounds": 3}
WAYS = ("plain", "memory_bio", "ssl_socket")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _send(port: int, ca: str | None, frames: int) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    if ca is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(ca)
        sock = context.wrap_socket(sock, server_hostname="127.0.0.1")
    data = os.urandom(FRAME_BYTES)
    for _ in range(frames):
        sock.sendall(data)
    if isinstance(sock, ssl.SSLSocket):
        sock = socket.socket(fileno=sock.detach())  # the TCP socket under it (no close_notify)
    # Half-close, then read what the server sent (TLS 1.3 session tickets) until it closes: closing
    # with unread bytes would reset the connection, and the receiver would lose the frames' tail.
    sock.shutdown(socket.SHUT_WR)
    while sock.recv(65536):
        pass
    sock.close()


def _read_plain(conn: socket.socket, frame: memoryview) -> int:
    total = 0
    while n := conn.recv_into(frame):
        total += n
    return total


def _read_ssl_socket(conn: ssl.SSLSocket, frame: memoryview) -> int:
    total = 0
    while True:
        try:
            n = conn.recv_into(frame)
        except (ssl.SSLEOFError, ConnectionResetError):
            return total
        if not n:
            return total
        total += n


def _read_memory_bio(conn: socket.socket, context: ssl.SSLContext, frame: memoryview) -> tuple[int, float]:
    """(bytes, CPU seconds) after the handshake, which is driven here by hand as asyncio does."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_side=True)
    buffer = memoryview(bytearray(256 * 1024))
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            if pending := outgoing.read():
                conn.sendall(pending)
            incoming.write(buffer[: conn.recv_into(buffer)])
    if pending := outgoing.read():
        conn.sendall(pending)
    start, total = _cpu(), 0
    while True:
        try:
            n = conn.recv_into(buffer)
        except ConnectionResetError:
            n = 0
        if not n:
            return total, _cpu() - start
        incoming.write(buffer[:n])
        while True:
            try:
                got = tls.read(FRAME_BYTES, frame)
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                break
            if not got:
                break
            total += got


def receive(way: str, pki, frames: int) -> float:
    """Receiver CPU seconds per GB for one way."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    sender = multiprocessing.Process(
        target=_send, args=(port, None if way == "plain" else str(pki.ca), frames)
    )
    sender.start()
    conn, _ = listener.accept()
    listener.close()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_keystore)
    frame = memoryview(bytearray(FRAME_BYTES))
    try:
        if way == "memory_bio":
            total, cpu = _read_memory_bio(conn, context, frame)
        elif way == "ssl_socket":
            conn = context.wrap_socket(conn, server_side=True)
            start = _cpu()
            total = _read_ssl_socket(conn, frame)
            cpu = _cpu() - start
        else:
            start = _cpu()
            total = _read_plain(conn, frame)
            cpu = _cpu() - start
    finally:
        conn.close()
        sender.join(60)
    if total < frames * FRAME_BYTES:
        raise RuntimeError(f"{way}: received {total} of {frames * FRAME_BYTES} bytes")
    return cpu / (total / 1e9)


def aes_gcm_decrypt(records: int) -> float:
    """CPU seconds per GB for AES-256-GCM decryption of 16 KiB records, the cipher alone."""
    cipher, nonce = AESGCM(os.urandom(32)), os.urandom(12)
    sealed = cipher.encrypt(nonce, os.urandom(16384), b"")
    start = _cpu()
    for _ in range(records):
        cipher.decrypt(nonce, sealed, b"")
    return (_cpu() - start) / (records * 16384 / 1e9)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller run, under 60 s")
    parser.add_argument("--frames", type=int, help="1 MB frames per way and round")
    parser.add_argument("--rounds", type=int)
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else FULL
    frames, rounds = args.frames or preset["frames"], args.rounds or preset["rounds"]
    with tempfile.TemporaryDirectory(prefix="onceflow-bench-tls-") as tmp:
        pki = make_pki(Path(tmp))
        samples: dict[str, list[float]] = {way: [] for way in (*WAYS, "aes_gcm_decrypt")}
        for round_no in range(1, rounds + 1):
            for way in WAYS:
                samples[way].append(receive(way, pki, frames))
                progress(f"round {round_no}/{rounds} {way:12s} {samples[way][-1]:.2f} CPU s/GB")
            samples["aes_gcm_decrypt"].append(aes_gcm_decrypt(frames * 64))
            progress(
                f"round {round_no}/{rounds} aes_gcm_decrypt {samples['aes_gcm_decrypt'][-1]:.2f} CPU s/GB"
            )
    results = {name: round(median(values), 2) for name, values in samples.items()}
    emit(
        {
            "bench": "tls_receive",
            "unit": "receiver CPU s/GB",
            "results": results,
            "ratios": {"ssl_socket/memory_bio": round(results["ssl_socket"] / results["memory_bio"], 3)},
            "tls_cost_s_per_gb": {
                way: round(results[way] - results["plain"], 2) for way in ("memory_bio", "ssl_socket")
            },
            "params": {
                "frames": frames,
                "frame_bytes": FRAME_BYTES,
                "rounds": rounds,
                "quick": args.quick,
                "openssl": ssl.OPENSSL_VERSION,
                "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "cpus": os.cpu_count(),
            },
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
