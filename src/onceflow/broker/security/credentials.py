"""SCRAM credentials: where they persist and the broker's service over them (KIP-554's two APIs).

``ScramStore`` is the seam, as ``quotas.store``: the broker loads every credential at start and saves
the whole set after each accepted AlterUserScramCredentials, before answering it, so an acknowledged
change survives a crash. A single node's store is ``<data-dir>/scram-credentials.json`` written
atomically; a cluster keeps them as UserScramCredentialRecord / RemoveUserScramCredentialRecord in
its metadata log. The file holds salts and derived keys, never passwords, and is
written readable by its owner only.

Alter and describe follow Kafka's controller and image (``ScramControlManager``, ``ScramImage``; the
checks are ``metadata.scram.plan_alteration``, which a cluster's controller applies too).

On a cluster broker the store is the metadata image's (``ImageScramStore`` in
``broker.cluster_metadata``): AlterUserScramCredentials goes to the active controller, and the
credentials change here when the image does (:meth:`ScramCredentials.replace`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

from onceflow.log.durable_file import write_atomically
from onceflow.metadata.scram import (
    MECHANISMS_BY_ID,
    Deletion,
    ScramCredential,
    Upsertion,
    credential_from_salted_password,
    plan_alteration,
)
from onceflow.protocol.errors import ErrorCode

FILE_NAME = "scram-credentials.json"
FORMAT_VERSION = 1

Key = tuple[str, str]  # (user, mechanism name)


class ScramStore(Protocol):
    def load(self) -> dict[Key, ScramCredential]: ...

    def save(self, credentials: Mapping[Key, ScramCredential]) -> None: ...


class FileScramStore:
    """``{"version": 1, "credentials": [{"user": u, "mechanism": "SCRAM-SHA-256", "salt": b64, ...}]}``."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / FILE_NAME

    def load(self) -> dict[Key, ScramCredential]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        try:
            document = json.loads(text)
            if document.get("version") != FORMAT_VERSION:
                raise ValueError(f"unknown format version {document.get('version')!r}")
            credentials = {}
            for item in document["credentials"]:
                mechanism = str(item["mechanism"])
                if mechanism not in MECHANISMS_BY_ID.values():
                    raise ValueError(f"unknown mechanism {mechanism!r}")
                credentials[(str(item["user"]), mechanism)] = ScramCredential.from_json(item)
        except Exception as exc:  # any damage: say which file; nobody could authenticate otherwise
            raise ValueError(f"{self.path} is damaged ({exc}); fix or remove it") from None
        return credentials

    def save(self, credentials: Mapping[Key, ScramCredential]) -> None:
        document = {
            "version": FORMAT_VERSION,
            "credentials": [
                {"user": user, "mechanism": mechanism, **credential.to_json()}
                for (user, mechanism), credential in sorted(credentials.items())
            ],
        }
        write_atomically(self.path, json.dumps(document, indent=1) + "\n", mode=0o600)


Result = tuple[str, ErrorCode, str | None]  # (user, error, message)


class ScramCredentials:
    """The broker's SCRAM credentials: looked up by the SCRAM mechanism, changed by the admin APIs."""

    def __init__(self, store: ScramStore) -> None:
        self._store = store
        self._credentials: dict[Key, ScramCredential] = store.load()

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._credentials.get((user, mechanism))

    def describe(
        self, users: Iterable[str] | None
    ) -> list[tuple[str, ErrorCode, str | None, list[tuple[int, int]]]]:
        """Per user: (user, error, message, [(mechanism id, iterations)]); None or empty: every user."""
        wanted = list(users or [])
        if not wanted:
            order = sorted({user for user, _ in self._credentials})
            repeated: set[str] = set()
        else:
            order = list(dict.fromkeys(wanted))
            repeated = {u for u in order if wanted.count(u) > 1}
        results = []
        for user in order:
            if user in repeated:
                results.append(
                    (
                        user,
                        ErrorCode.DUPLICATE_RESOURCE,
                        f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}",
                        [],
                    )
                )
                continue
            infos = [
                (mechanism_id, self._credentials[(user, name)].iterations)
                for mechanism_id, name in sorted(MECHANISMS_BY_ID.items())
                if (user, name) in self._credentials
            ]
            if infos:
                results.append((user, ErrorCode.NONE, None, infos))
            else:
                results.append(
                    (
                        user,
                        ErrorCode.RESOURCE_NOT_FOUND,
                        f"Attempt to describe a user credential that does not exist: {user}",
                        [],
                    )
                )
        return results

    def alter(self, upsertions: list[Upsertion], deletions: list[Deletion]) -> list[Result]:
        """Check every change as Kafka's controller does (``metadata.scram.plan_alteration``), apply
        the valid ones together and save them (OSError if the store cannot be written: then nothing
        changed). One result per user."""
        to_delete, to_upsert, errors = plan_alteration(
            lambda user, mechanism: (user, mechanism) in self._credentials, upsertions, deletions
        )
        changed = dict(self._credentials)
        for deletion in to_delete.values():
            del changed[(deletion.user, MECHANISMS_BY_ID[deletion.mechanism])]
        for upsertion in to_upsert.values():
            name = MECHANISMS_BY_ID[upsertion.mechanism]
            changed[(upsertion.user, name)] = credential_from_salted_password(
                name, upsertion.salt, upsertion.salted_password, upsertion.iterations
            )
        if to_delete or to_upsert:
            self._store.save(changed)
            self._credentials = changed
        results: list[Result] = [(user, ErrorCode.NONE, None) for user in to_delete]
        results += [(user, ErrorCode.NONE, None) for user in to_upsert]
        results += [(user, code, message) for user, (code, message) in errors.items()]
        return results

    def replace(self, credentials: Mapping[Key, ScramCredential]) -> None:
        """A cluster broker: the credentials are now these (its metadata image's), nothing saved."""
        self._credentials = dict(credentials)

    def set_credential(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        """Offline administration (``onceflow users scram set --data-dir``): set one and save."""
        changed = {**self._credentials, (user, mechanism): credential}
        self._store.save(changed)
        self._credentials = changed

    def delete_credential(self, user: str, mechanism: str) -> bool:
        if (user, mechanism) not in self._credentials:
            return False
        changed = {k: v for k, v in self._credentials.items() if k != (user, mechanism)}
        self._store.save(changed)
        self._credentials = changed
        return True

    def users(self) -> dict[str, dict[str, int]]:
        """user -> {mechanism: iterations}."""
        result: dict[str, dict[str, int]] = {}
        for (user, mechanism), credential in sorted(self._credentials.items()):
            result.setdefault(user, {})[mechanism] = credential.iterations
        return result
