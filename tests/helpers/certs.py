"""Test certificates made on the fly with ``cryptography`` (never checked in): a CA, a server
certificate for 127.0.0.1/localhost, client certificates for mTLS, a cluster node's certificate (for
serving and for connecting to the other nodes), and a CA nobody trusts.

``make_pki(dir)`` writes PEM files and returns their paths; EC P-256 keys keep generation fast.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA certificate clients and the broker trust
    server_cert: Path  # the broker's certificate chain (leaf, then CA)
    server_key: Path
    server_keystore: Path  # key and chain in one PEM file (ssl.keystore.location)
    client_cert: Path  # CN=alice,OU=eng,O=onceflow (mTLS)
    client_key: Path
    other_client_cert: Path  # CN=bob,OU=ops,O=onceflow
    other_client_key: Path
    rogue_cert: Path  # CN=mallory, signed by a CA the broker does not trust
    rogue_key: Path
    encrypted_keystore: Path  # the server key encrypted with KEY_PASSWORD, with its chain
    node_keystore: Path  # CN=node: a cluster node's key and chain, for serving and as a client (mTLS)
    key_password: str = "keystore-secret"


def _name(**parts: str) -> x509.Name:
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "O": NameOID.ORGANIZATION_NAME}
    # Issued as O, OU, CN (most general first): RFC 2253 prints them the other way round.
    order = [k for k in ("O", "OU", "CN") if k in parts]
    return x509.Name([x509.NameAttribute(oids[k], parts[k]) for k in order])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(
    subject, key, issuer, issuer_key, *, ca: bool, server: bool = False, client_too: bool = False
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
        if server and client_too:  # a cluster node: it serves and connects to the other nodes
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key, password: str | None = None) -> bytes:
    encryption = (
        serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
    )
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name(CN="onceflow test CA", O="onceflow")
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    rogue_ca_key = _key()
    rogue_ca_name = _name(CN="rogue CA", O="elsewhere")
    rogue_ca = _cert(rogue_ca_name, rogue_ca_key, rogue_ca_name, rogue_ca_key, ca=True)

    def write(name: str, data: bytes) -> Path:
        path = directory / name
        path.write_bytes(data)
        return path

    server_key = _key()
    server = _cert(_name(CN="localhost", O="onceflow"), server_key, ca_name, ca_key, ca=False, server=True)
    alice_key, bob_key, mallory_key = _key(), _key(), _key()
    alice = _cert(_name(CN="alice", OU="eng", O="onceflow"), alice_key, ca_name, ca_key, ca=False)
    bob = _cert(_name(CN="bob", OU="ops", O="onceflow"), bob_key, ca_name, ca_key, ca=False)
    mallory = _cert(_name(CN="mallory", O="elsewhere"), mallory_key, rogue_ca_name, rogue_ca_key, ca=False)
    node_key = _key()
    node = _cert(
        _name(CN="node", O="onceflow"), node_key, ca_name, ca_key, ca=False, server=True, client_too=True
    )
    password = "keystore-secret"
    return Pki(
        ca=write("ca.pem", _pem(ca)),
        server_cert=write("server-chain.pem", _pem(server) + _pem(ca)),
        server_key=write("server-key.pem", _key_pem(server_key)),
        server_keystore=write("server-keystore.pem", _key_pem(server_key) + _pem(server) + _pem(ca)),
        client_cert=write("alice.pem", _pem(alice)),
        client_key=write("alice-key.pem", _key_pem(alice_key)),
        other_client_cert=write("bob.pem", _pem(bob)),
        other_client_key=write("bob-key.pem", _key_pem(bob_key)),
        rogue_cert=write("mallory.pem", _pem(mallory) + _pem(rogue_ca)),
        rogue_key=write("mallory-key.pem", _key_pem(mallory_key)),
        encrypted_keystore=write(
            "server-keystore-encrypted.pem", _key_pem(server_key, password) + _pem(server) + _pem(ca)
        ),
        node_keystore=write("node-keystore.pem", _key_pem(node_key) + _pem(node) + _pem(ca)),
        key_password=password,
    )
