"""``onceflow quotas set|describe``: client quotas, as ``kafka-configs.sh --entity-type clients|users``
sets and shows them (KIP-546's AlterClientQuotas and DescribeClientQuotas).

    onceflow quotas set --client app --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
    onceflow quotas set --client-defaults --add-config request_percentage=50
    onceflow quotas set --user ANONYMOUS --client app --delete-config producer_byte_rate
    onceflow quotas describe [--client app | --client-defaults] [--user U | --user-defaults]
    onceflow quotas describe --entity-type clients

A client's user is the name its connection authenticated as (SASL, or a client certificate; see
docs/security.md), ``ANONYMOUS`` on a listener without authentication.
"""

from __future__ import annotations

import asyncio

import click
from rich.table import Table

from onceflow.cli.common import BadValue, bootstrap_option, client_security, friendly_errors, out

_ENTITY_TYPES = {"clients": "client-id", "users": "user"}


def _entity(client: str | None, client_defaults: bool, user: str | None, user_defaults: bool) -> dict:
    if client is not None and client_defaults:
        raise click.UsageError("give --client or --client-defaults, not both")
    if user is not None and user_defaults:
        raise click.UsageError("give --user or --user-defaults, not both")
    entity: dict[str, str | None] = {}
    if user is not None or user_defaults:
        entity["user"] = user
    if client is not None or client_defaults:
        entity["client-id"] = client
    return entity


# Kafka's quota keys of client and user entities (KIP-13, KIP-124, KIP-599).
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")


def _check_key(key: str) -> None:
    """A key that looks like a typo of a quota key is refused here, naming the key meant; any other
    unknown key is left to the broker (which refuses it with INVALID_REQUEST)."""
    import difflib

    close = difflib.get_close_matches(key, QUOTA_KEYS, n=1, cutoff=0.8)
    if key not in QUOTA_KEYS and close:
        raise BadValue(f"unknown quota {key!r}; did you mean {close[0]!r}?", param_hint="--add-config")


def _parse_add_config(text: str | None) -> dict[str, float]:
    values = {}
    for pair in (text or "").split(","):
        if not pair.strip():
            continue
        key, sep, value = pair.partition("=")
        try:
            values[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not key.strip():
            raise BadValue(f"{pair!r} is not KEY=NUMBER", param_hint="--add-config")
    return values


def _entity_options(command):
    for option in reversed(
        (
            click.option("--client", metavar="CLIENT_ID", help="The client-id the quotas are for."),
            click.option("--client-defaults", is_flag=True, help="The default of every client-id."),
            click.option("--user", metavar="USER", help="The user (principal) the quotas are for."),
            click.option("--user-defaults", is_flag=True, help="The default of every user."),
        )
    ):
        command = option(command)
    return command


def _name(name: str | None) -> str:
    return "<default>" if name is None else name


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)


@click.group()
def quotas():
    """Set and show client quotas (byte rates, request percentage) of client-ids and users."""


@quotas.command(name="set")
@_entity_options
@click.option("--add-config", metavar="K=V,...", help="Quotas to set, e.g. producer_byte_rate=1048576.")
@click.option("--delete-config", metavar="K,...", help="Quotas to remove, e.g. consumer_byte_rate.")
@bootstrap_option
def set_(client, client_defaults, user, user_defaults, add_config, delete_config, bootstrap):
    """Set or remove quotas of one entity (a client-id, a user, or both; or their defaults)."""
    entity = _entity(client, client_defaults, user, user_defaults)
    if not entity:
        raise click.UsageError("name the entity: --client, --client-defaults, --user or --user-defaults")
    values = _parse_add_config(add_config)
    delete = [k.strip() for k in (delete_config or "").split(",") if k.strip()]
    for key in [*values, *delete]:
        _check_key(key)
    if not values and not delete:
        raise click.UsageError("nothing to do: give --add-config and/or --delete-config")
    from onceflow.client.admin import AsyncAdminClient

    async def alter() -> None:
        async with AsyncAdminClient(
            bootstrap, client_id="onceflow-quotas", security=client_security()
        ) as admin:
            await admin.alter_client_quotas(entity, values, delete)

    with friendly_errors(bootstrap):
        asyncio.run(alter())
    described = ", ".join(f"{t}={_name(n)}" for t, n in entity.items())
    changes = [f"{k}={_number(v)}" for k, v in values.items()] + [f"{k} removed" for k in delete]
    out.print(f"quotas of {described}: {', '.join(changes)}")


@quotas.command()
@_entity_options
@click.option(
    "--entity-type",
    "entity_types",
    multiple=True,
    type=click.Choice(sorted(_ENTITY_TYPES)),
    help="Every entity of this type (repeatable).",
)
@bootstrap_option
def describe(client, client_defaults, user, user_defaults, entity_types, bootstrap):
    """Show quotas: of one entity, of every entity of a type, or all of them."""
    exact = _entity(client, client_defaults, user, user_defaults)
    specified = [_ENTITY_TYPES[t] for t in entity_types if _ENTITY_TYPES[t] not in exact]
    from onceflow.client.admin import AsyncAdminClient

    async def describe_quotas():
        async with AsyncAdminClient(
            bootstrap, client_id="onceflow-quotas", security=client_security()
        ) as admin:
            return await admin.describe_client_quotas(exact, specified, strict=bool(exact or specified))

    with friendly_errors(bootstrap):
        entries = asyncio.run(describe_quotas())
    if not entries:
        out.print("no client quotas match")
        return
    table = Table(title="client quotas")
    for column in ("user", "client-id", "quotas"):
        table.add_column(column)
    for entry in sorted(
        entries, key=lambda e: (str(e.entity.get("user", "")), str(e.entity.get("client-id", "")))
    ):
        table.add_row(
            _name(entry.entity["user"]) if "user" in entry.entity else "",
            _name(entry.entity["client-id"]) if "client-id" in entry.entity else "",
            ", ".join(f"{k}={_number(v)}" for k, v in sorted(entry.values.items())),
        )
    out.print(table)
