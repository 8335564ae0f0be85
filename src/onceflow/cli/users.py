"""``onceflow users scram set|delete|list``: users' SCRAM credentials, as ``kafka-configs.sh --alter
--entity-type users`` manages them (KIP-554's AlterUserScramCredentials / DescribeUserScramCredentials).

    onceflow users scram set --user alice --mechanism SCRAM-SHA-512 --password alice-secret
    onceflow users scram set --user alice --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'
    onceflow users scram delete --user alice --mechanism SCRAM-SHA-256
    onceflow users scram list [--user alice]

The password is salted and iterated here; the broker only ever gets the salt and the salted password.
Without ``--password`` (or a password in ``--add-config``) it is asked for, unechoed.

``--data-dir DIR`` instead of ``--bootstrap-server`` writes the credential store of a stopped broker
(as ``kafka-storage format --add-scram``): how the first administrator gets a credential on a broker
that only accepts SASL clients. A cluster node reads that store once, at the cluster's first start
(its controller writes the credentials into the metadata log), so on a cluster it is for the data
dirs of nodes that have never run.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import click
from rich.table import Table

from onceflow.cli.common import bootstrap_option, client_security, friendly_errors, out

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_ADD_CONFIG = re.compile(r"^\s*(SCRAM-SHA-(?:256|512))\s*=\s*\[(.*)\]\s*$", re.IGNORECASE)


def _parse_add_config(text: str) -> tuple[str, int | None, str | None]:
    """``SCRAM-SHA-256=[iterations=8192,password=secret]`` (kafka-configs' form)."""
    match = _ADD_CONFIG.match(text)
    if match is None:
        raise click.BadParameter(
            f"{text!r} is not SCRAM-SHA-256=[iterations=N,password=P]", param_hint="--add-config"
        )
    mechanism, inner = match.group(1).upper(), match.group(2)
    iterations, password = None, None
    for part in inner.split(","):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if key == "iterations" and sep:
            try:
                iterations = int(value)
            except ValueError:
                raise click.BadParameter(
                    f"iterations must be a number, not {value!r}", param_hint="--add-config"
                )
        elif key == "password" and sep:
            password = value
        elif part.strip():
            raise click.BadParameter(
                f"unknown {part.strip()!r} (iterations, password)", param_hint="--add-config"
            )
    return mechanism, iterations, password


def _offline(data_dir: Path):
    """The credential store of a stopped broker's data dir (refused while a broker runs on it)."""
    from onceflow.broker.data_dir_lock import DataDirError, lock_data_dir
    from onceflow.broker.security.credentials import FileScramStore, ScramCredentials

    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        lock = lock_data_dir(data_dir)
    except DataDirError as exc:
        raise click.ClickException(f"{exc}: stop the broker, or use --bootstrap-server")
    try:
        return ScramCredentials(FileScramStore(data_dir)), lock
    except ValueError as exc:
        lock.release()
        raise click.ClickException(str(exc))


def _run(bootstrap: str, work):
    from onceflow.client.admin import AsyncAdminClient

    async def run():
        async with AsyncAdminClient(
            bootstrap, client_id="onceflow-users", security=client_security()
        ) as admin:
            return await work(admin)

    with friendly_errors(bootstrap):
        return asyncio.run(run())


data_dir_option = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Change a stopped broker's data dir directly instead of asking a broker "
    "(a cluster node's: only before the cluster's first start).",
)


@click.group()
def users():
    """Manage users' credentials."""


@users.group()
def scram():
    """SCRAM-SHA-256 / SCRAM-SHA-512 credentials (KIP-554)."""


@scram.command(name="set")
@click.option("--user", required=True, help="The user name (the SASL username).")
@click.option(
    "--mechanism", type=click.Choice(MECHANISMS, case_sensitive=False), help="Default SCRAM-SHA-512."
)
@click.option(
    "--iterations", type=click.IntRange(4096, 16384), help="Default 4096 (Kafka's bounds: 4096..16384)."
)
@click.option("--password", help="The password (asked for when left out).")
@click.option(
    "--add-config", metavar="MECH=[iterations=N,password=P]", help="kafka-configs' form of the above."
)
@data_dir_option
@bootstrap_option
def set_(user, mechanism, iterations, password, add_config, data_dir, bootstrap):
    """Create or replace a user's credential for one mechanism."""
    if add_config:
        if mechanism or iterations or password:
            raise click.UsageError("give --add-config or --mechanism/--iterations/--password, not both")
        mechanism, iterations, password = _parse_add_config(add_config)
        if iterations is not None and not 4096 <= iterations <= 16384:
            raise click.BadParameter("iterations must be in 4096..16384", param_hint="--add-config")
    mechanism = (mechanism or "SCRAM-SHA-512").upper()
    iterations = iterations or 4096
    if password is None:
        password = click.prompt(f"password for {user}", hide_input=True, confirmation_prompt=True)
    if data_dir is not None:
        from onceflow.broker.security.scram import credential_from_password

        credentials, lock = _offline(data_dir)
        try:
            credentials.set_credential(
                user, mechanism, credential_from_password(mechanism, password, iterations)
            )
        finally:
            lock.release()
    else:
        _run(bootstrap, lambda admin: admin.set_scram_credential(user, password, mechanism, iterations))
    out.print(f"{mechanism} credential of user {user} set ({iterations} iterations)", markup=False)


@scram.command()
@click.option("--user", required=True)
@click.option(
    "--mechanism", type=click.Choice(MECHANISMS, case_sensitive=False), help="Default SCRAM-SHA-512."
)
@click.option("--delete-config", metavar="MECH", help="kafka-configs' form: SCRAM-SHA-256.")
@data_dir_option
@bootstrap_option
def delete(user, mechanism, delete_config, data_dir, bootstrap):
    """Delete a user's credential for one mechanism."""
    chosen = (mechanism or delete_config or "SCRAM-SHA-512").strip().upper()
    if chosen not in MECHANISMS:
        raise click.BadParameter(
            f"{chosen!r} is not SCRAM-SHA-256 or SCRAM-SHA-512", param_hint="--delete-config"
        )
    if data_dir is not None:
        credentials, lock = _offline(data_dir)
        try:
            if not credentials.delete_credential(user, chosen):
                raise click.ClickException(f"user {user} has no {chosen} credential")
        finally:
            lock.release()
    else:
        _run(bootstrap, lambda admin: admin.delete_scram_credential(user, chosen))
    out.print(f"{chosen} credential of user {user} deleted", markup=False)


@scram.command(name="list")
@click.option("--user", "names", multiple=True, help="Only these users (repeatable).")
@data_dir_option
@bootstrap_option
def list_(names, data_dir, bootstrap):
    """Which users have SCRAM credentials, for which mechanisms (never the credentials)."""
    if data_dir is not None:
        credentials, lock = _offline(data_dir)
        lock.release()
        found = credentials.users()
        missing = [n for n in names if n not in found]
        if missing:
            raise click.ClickException(f"user {missing[0]} has no SCRAM credential")
        found = {u: m for u, m in found.items() if not names or u in names}
    else:
        found = _run(bootstrap, lambda admin: admin.describe_user_scram_credentials(list(names) or None))
    if not found:
        out.print("no user has a SCRAM credential")
        return
    table = Table(title="SCRAM credentials")
    table.add_column("user")
    table.add_column("mechanisms (iterations)")
    for user, mechanisms in sorted(found.items()):
        table.add_row(user, ", ".join(f"{m} ({i})" for m, i in sorted(mechanisms.items())))
    out.print(table)
