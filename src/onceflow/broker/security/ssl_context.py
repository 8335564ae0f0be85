"""A listener's TLS server context from Kafka's ``ssl.*`` settings, PEM only (``ssl.keystore.type=PEM``).

Kafka's two PEM forms are both taken: files (``ssl.keystore.location``, one PEM file with the private
key and the certificate chain, ``ssl.key.password`` if the key is encrypted; ``ssl.truststore.location``,
one PEM file of trusted certificates) or the PEM text itself (``ssl.keystore.key`` and
``ssl.keystore.certificate.chain``; ``ssl.truststore.certificates``). TLS 1.2 is the oldest version
served whatever ``ssl.enabled.protocols`` says; ``ssl.client.auth`` is ``none``, ``requested`` (a
client certificate is checked if sent) or ``required`` (mTLS).
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_OLD_VERSIONS = frozenset({"TLSv1", "TLSv1.1", "SSLv3", "SSLv2", "SSLv2Hello"})


def server_context(get: Callable[[str], str | None], listener: str) -> ssl.SSLContext:
    """``get(key)`` gives a setting as the listener sees it (its ``listener.name.<l>.`` override, or
    the broker-wide value). Raises ValueError naming the setting that is wrong."""
    where = f"listener {listener}"
    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        kind = get(key)
        if kind is not None and kind.upper() != "PEM":
            raise ValueError(f"{key}={kind} on {where}: onceflow reads PEM only (ssl.keystore.type=PEM)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    low, high = _versions(get("ssl.enabled.protocols"), where)
    context.minimum_version, context.maximum_version = low, high
    _load_key_and_chain(context, get, where)
    _load_trust(context, get, where)
    client_auth = (get("ssl.client.auth") or "none").strip().lower()
    if client_auth not in CLIENT_AUTH:
        raise ValueError(f"ssl.client.auth={client_auth!r} on {where}: use required, requested or none")
    context.verify_mode = CLIENT_AUTH[client_auth]
    if client_auth != "none" and not (get("ssl.truststore.location") or get("ssl.truststore.certificates")):
        raise ValueError(
            f"ssl.client.auth={client_auth} on {where} needs ssl.truststore.location (the CA certificates "
            "client certificates must be signed by)"
        )
    ciphers = get("ssl.cipher.suites")
    if ciphers:
        try:
            context.set_ciphers(":".join(c.strip() for c in ciphers.split(",") if c.strip()))
        except ssl.SSLError:
            raise ValueError(
                f"ssl.cipher.suites on {where}: no cipher of {ciphers!r} is known to OpenSSL"
            ) from None
    return context


def _versions(text: str | None, where: str) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    if not text:
        return ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3
    wanted = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in wanted if v not in _VERSIONS and v not in _OLD_VERSIONS]
    if unknown:
        raise ValueError(
            f"ssl.enabled.protocols on {where}: unknown protocol {unknown[0]!r} (TLSv1.2, TLSv1.3)"
        )
    kept = [_VERSIONS[v] for v in wanted if v in _VERSIONS]
    if not kept:
        raise ValueError(
            f"ssl.enabled.protocols on {where} must include TLSv1.2 or TLSv1.3 (older ones are not served)"
        )
    return min(kept), max(kept)


def _load_key_and_chain(context: ssl.SSLContext, get: Callable[[str], str | None], where: str) -> None:
    location = get("ssl.keystore.location")
    key_text, chain_text = get("ssl.keystore.key"), get("ssl.keystore.certificate.chain")
    password = get("ssl.key.password") or get("ssl.keystore.password")
    if location and (key_text or chain_text):
        raise ValueError(
            f"{where}: give ssl.keystore.location or ssl.keystore.key/certificate.chain, not both"
        )
    try:
        if location:
            context.load_cert_chain(location, password=password)
        elif key_text and chain_text:
            # ssl reads key material from files only: a private temporary file, removed at once.
            with tempfile.TemporaryDirectory() as directory:
                path = os.path.join(directory, "keystore.pem")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(key_text.strip() + "\n" + chain_text.strip() + "\n")
                context.load_cert_chain(path, password=password)
        else:
            raise ValueError(
                f"{where} serves TLS and needs its certificate: ssl.keystore.location (a PEM file with the "
                "private key and the certificate chain), or ssl.keystore.key and ssl.keystore.certificate.chain"
            )
    except FileNotFoundError:
        raise ValueError(f"ssl.keystore.location on {where}: {location} does not exist") from None
    except ssl.SSLError as exc:
        raise ValueError(
            f"{where}: cannot use the keystore ({exc.reason or exc}); is ssl.key.password right, and does "
            "the PEM hold the private key and its certificate?"
        ) from None


def _load_trust(context: ssl.SSLContext, get: Callable[[str], str | None], where: str) -> None:
    location, certificates = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    try:
        if location:
            context.load_verify_locations(cafile=location)
        if certificates:
            context.load_verify_locations(cadata=certificates)
    except FileNotFoundError:
        raise ValueError(f"ssl.truststore.location on {where}: {location} does not exist") from None
    except ssl.SSLError as exc:
        raise ValueError(f"{where}: cannot read the truststore ({exc.reason or exc})") from None
