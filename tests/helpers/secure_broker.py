"""A broker process with every kind of listener, an authorizer and known users, for the security tests
(one per test module: certificates, credentials and ACL files are made in its data dir).

Listeners (all on loopback): SASL_SSL (SCRAM-SHA-256/512 and PLAIN), SSL with required client
certificates (mTLS), SASL_PLAINTEXT (the same users without TLS, for the request matrix), and a
PLAINTEXT one where anonymous clients get nothing (no ACL names ``User:ANONYMOUS``).

Users: ``admin`` (a super user) and ``alice``/``bob`` by SCRAM-SHA-512 and SCRAM-SHA-256 (set offline
with ``onceflow users scram set --data-dir`` before the start, as an operator bootstraps a broker);
``admin``, ``carol`` and ``dave`` by PLAIN (JAAS ``user_`` entries); ``CN=alice,OU=eng,O=onceflow``
by certificate, mapped to ``alice`` by ``ssl.principal.mapping.rules``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.broker import LOOPBACK, BrokerProcess, free_port, port_accepts
from tests.helpers.certs import Pki, make_pki

from onceflow.broker.security.credentials import FileScramStore, ScramCredentials
from onceflow.broker.security.scram import credential_from_password

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
PLAIN_PASSWORDS = {"admin": "admin-secret", "carol": "carol-secret", "dave": "dave-secret"}
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{name}="{password}"' for name, password in PLAIN_PASSWORDS.items())
    + ";"
)


class SecureBroker(BrokerProcess):
    name = "onceflow-secure"

    def __init__(self, data_dir: Path, extra: dict[str, str] | None = None) -> None:
        super().__init__(data_dir)
        self.pki: Pki = make_pki(self.data_dir / "pki")
        self.sasl_ssl_port, self.ssl_port, self.sasl_port, self.plain_port = (free_port() for _ in range(4))
        self._port = self.sasl_ssl_port
        self.settings = {
            "listeners": ",".join(
                [
                    f"SASL_SSL://{LOOPBACK}:{self.sasl_ssl_port}",
                    f"SSL://{LOOPBACK}:{self.ssl_port}",
                    f"SASL_PLAINTEXT://{LOOPBACK}:{self.sasl_port}",
                    f"PLAINTEXT://{LOOPBACK}:{self.plain_port}",
                ]
            ),
            "ssl.keystore.location": str(self.pki.server_keystore),
            "ssl.truststore.location": str(self.pki.ca),
            "listener.name.ssl.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=.*$/$1/,DEFAULT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
            "sasl.jaas.config": PLAIN_JAAS,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
            "connection.failed.authentication.delay.ms": "0",
            "group.initial.rebalance.delay.ms": "0",
            "transaction.state.log.num.partitions": "2",
            **(extra or {}),
        }
        # The administrator as an operator makes one, with the CLI on the stopped broker's data dir;
        # the others straight into the same store.
        subprocess.run(
            [
                sys.executable,
                "-m",
                "onceflow",
                "users",
                "scram",
                "set",
                "--user",
                "admin",
                "--password",
                PASSWORDS["admin"],
                "--data-dir",
                str(self.data_dir),
            ],
            check=True,
            capture_output=True,
        )
        credentials = ScramCredentials(FileScramStore(self.data_dir))
        for user, password in PASSWORDS.items():
            for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
                if (user, mechanism) != ("admin", "SCRAM-SHA-512"):
                    credentials.set_credential(user, mechanism, credential_from_password(mechanism, password))

    def command(self) -> list[str]:
        configs = [arg for key, value in self.settings.items() for arg in ("--config", f"{key}={value}")]
        return [sys.executable, "-m", "onceflow", "serve", "--data-dir", str(self.data_dir), *configs]

    def _is_ready(self, log_text: str) -> bool:
        return "onceflow broker listening on" in log_text and all(
            port_accepts(p) for p in (self.sasl_ssl_port, self.ssl_port, self.sasl_port, self.plain_port)
        )

    # -- client settings (librdkafka's names) -------------------------------------------------------

    def scram(
        self, user: str = "admin", mechanism: str = "SCRAM-SHA-512", password: str | None = None
    ) -> dict:
        return {
            "bootstrap.servers": f"{LOOPBACK}:{self.sasl_ssl_port}",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": PASSWORDS.get(user, "") if password is None else password,
            "ssl.ca.location": str(self.pki.ca),
        }

    def plain(self, user: str = "carol", password: str | None = None) -> dict:
        return {
            "bootstrap.servers": f"{LOOPBACK}:{self.sasl_ssl_port}",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": PLAIN_PASSWORDS.get(user, "") if password is None else password,
            "ssl.ca.location": str(self.pki.ca),
        }

    def mtls(self, who: str = "alice") -> dict:
        cert, key = (
            (self.pki.client_cert, self.pki.client_key)
            if who == "alice"
            else (self.pki.other_client_cert, self.pki.other_client_key)
        )
        return {
            "bootstrap.servers": f"{LOOPBACK}:{self.ssl_port}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.pki.ca),
            "ssl.certificate.location": str(cert),
            "ssl.key.location": str(key),
        }

    def sasl_plaintext(self, user: str = "admin", password: str | None = None) -> dict:
        return {
            "bootstrap.servers": f"{LOOPBACK}:{self.sasl_port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": PASSWORDS.get(user, "") if password is None else password,
        }
