"""``onceflow acls add|list|remove``: ACLs with ``kafka-acls.sh``'s flags (CreateAcls, DescribeAcls,
DeleteAcls; the broker needs an authorizer, see docs/security.md).

    onceflow acls add --allow-principal User:alice --operation Read --operation Describe --topic orders
    onceflow acls add --allow-principal User:app --producer --topic orders --transactional-id app-
    onceflow acls add --allow-principal User:app --consumer --topic orders --group app
    onceflow acls add --deny-principal User:mallory --operation All --topic secret- --resource-pattern-type prefixed
    onceflow acls list [--topic orders] [--principal User:alice] [--resource-pattern-type match]
    onceflow acls remove --allow-principal User:alice --operation Read --topic orders
    onceflow acls remove --topic orders --force        # every ACL of the topic

As kafka-acls: without ``--allow-host``/``--deny-host`` an ACL is for every host (``*``); without
``--operation`` it is ALL; ``--producer`` means WRITE, DESCRIBE and CREATE on the topics (and WRITE,
DESCRIBE on the transactional ids; IDEMPOTENT_WRITE on the cluster with ``--idempotent``);
``--consumer`` means READ and DESCRIBE on the topics and READ on the groups.
"""

from __future__ import annotations

import asyncio

import click

from onceflow.cli.common import bootstrap_option, client_security, friendly_errors, out
from onceflow.protocol.acl_types import AclOperation, PatternType, PermissionType, ResourceType

CLUSTER_NAME = "kafka-cluster"
_SUPPORTED = {
    ResourceType.TOPIC: {
        "READ",
        "WRITE",
        "CREATE",
        "DESCRIBE",
        "DELETE",
        "ALTER",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
    },
    ResourceType.GROUP: {"READ", "DESCRIBE", "DELETE"},
    ResourceType.CLUSTER: {
        "CREATE",
        "CLUSTER_ACTION",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
        "IDEMPOTENT_WRITE",
        "ALTER",
        "DESCRIBE",
    },
    ResourceType.TRANSACTIONAL_ID: {"DESCRIBE", "WRITE"},
}


def _resource_options(command):
    for option in reversed(
        (
            click.option(
                "--topic", "topics", multiple=True, metavar="NAME", help="A topic (repeatable; * for all)."
            ),
            click.option(
                "--group", "groups", multiple=True, metavar="NAME", help="A consumer group (repeatable)."
            ),
            click.option(
                "--transactional-id",
                "transactional_ids",
                multiple=True,
                metavar="ID",
                help="A transactional id.",
            ),
            click.option("--cluster", is_flag=True, help="The cluster resource (kafka-cluster)."),
        )
    ):
        command = option(command)
    return command


def _resources(topics, groups, transactional_ids, cluster) -> list[tuple[ResourceType, str]]:
    found = [(ResourceType.TOPIC, t) for t in topics]
    found += [(ResourceType.GROUP, g) for g in groups]
    found += [(ResourceType.TRANSACTIONAL_ID, t) for t in transactional_ids]
    if cluster:
        found.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return found


def _pattern(text: str | None, default: PatternType, allowed: tuple[PatternType, ...]) -> PatternType:
    if text is None:
        return default
    try:
        pattern = PatternType.from_text(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--resource-pattern-type")
    if pattern not in allowed:
        names = ", ".join(p.name.lower() for p in allowed)
        raise click.BadParameter(
            f"{text!r} cannot be used here; use {names}", param_hint="--resource-pattern-type"
        )
    return pattern


def _operations(texts: tuple[str, ...]) -> list[AclOperation]:
    try:
        return [AclOperation.from_text(t) for t in texts]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--operation")


def _principals(texts: tuple[str, ...], flag: str) -> list[str]:
    for text in texts:
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise click.BadParameter(f"{text!r} is not <type>:<name>, e.g. User:alice", param_hint=flag)
    return list(texts)


def _bindings(
    resources, operations, allow, deny, allow_hosts, deny_hosts, pattern, producer, consumer, idempotent
):
    from onceflow.client.admin_security import AclBinding

    wanted: list[tuple[ResourceType, str, AclOperation]] = []
    if producer or consumer:
        for rtype, name in resources:
            if rtype == ResourceType.TOPIC:
                ops = ["WRITE", "DESCRIBE", "CREATE"] if producer else []
                ops += ["READ", "DESCRIBE"] if consumer else []
                wanted += [(rtype, name, AclOperation[op]) for op in dict.fromkeys(ops)]
            elif rtype == ResourceType.TRANSACTIONAL_ID and producer:
                wanted += [(rtype, name, AclOperation.WRITE), (rtype, name, AclOperation.DESCRIBE)]
            elif rtype == ResourceType.GROUP and consumer:
                wanted.append((rtype, name, AclOperation.READ))
        if producer and idempotent:
            wanted.append((ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.IDEMPOTENT_WRITE))
    else:
        for rtype, name in resources:
            for op in operations or [AclOperation.ALL]:
                if op != AclOperation.ALL and op.name not in _SUPPORTED[rtype]:
                    supported = ", ".join(sorted(o.lower() for o in _SUPPORTED[rtype]))
                    raise click.UsageError(
                        f"{rtype.name.lower()} supports the operations {supported}, not {op.name.lower()}"
                    )
                wanted.append((rtype, name, op))
    bindings = []
    for principal in allow:
        for host in allow_hosts or ("*",):
            bindings += [
                AclBinding(rtype, name, pattern, principal, host, op, PermissionType.ALLOW)
                for rtype, name, op in wanted
            ]
    for principal in deny:
        for host in deny_hosts or ("*",):
            bindings += [
                AclBinding(rtype, name, pattern, principal, host, op, PermissionType.DENY)
                for rtype, name, op in wanted
            ]
    return bindings


def _run(bootstrap: str, work):
    from onceflow.client.admin import AsyncAdminClient

    async def run():
        async with AsyncAdminClient(
            bootstrap, client_id="onceflow-acls", security=client_security()
        ) as admin:
            return await work(admin)

    with friendly_errors(bootstrap):
        return asyncio.run(run())


def _print(bindings) -> None:
    by_resource: dict[tuple, list] = {}
    for b in bindings:
        by_resource.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    for (rtype, name, pattern), acls in sorted(by_resource.items()):
        out.print(
            f"Current ACLs for resource `ResourcePattern(resourceType={rtype.name}, name={name}, patternType={pattern.name})`:",
            markup=False,
        )
        for b in acls:
            out.print(
                f"  (principal={b.principal}, host={b.host}, operation={b.operation.name}, "
                f"permissionType={b.permission.name})",
                markup=False,
            )


_principal_options = (
    click.option(
        "--allow-principal",
        "allow",
        multiple=True,
        metavar="TYPE:NAME",
        help="Principal to allow, e.g. User:alice.",
    ),
    click.option("--deny-principal", "deny", multiple=True, metavar="TYPE:NAME", help="Principal to deny."),
    click.option(
        "--allow-host", "allow_hosts", multiple=True, metavar="HOST", help="Host allowed (default *)."
    ),
    click.option("--deny-host", "deny_hosts", multiple=True, metavar="HOST", help="Host denied (default *)."),
    click.option(
        "--operation",
        "operations",
        multiple=True,
        metavar="OP",
        help="Read, Write, Create, Describe, ... (default All).",
    ),
)


def _with(options):
    def decorate(command):
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


@click.group()
def acls():
    """Add, list and remove ACLs (kafka-acls.sh's flags)."""


@acls.command()
@_with(_principal_options)
@_resource_options
@click.option(
    "--resource-pattern-type", "pattern_type", metavar="TYPE", help="literal (default) or prefixed."
)
@click.option("--producer", is_flag=True, help="The ACLs a producer needs (Write, Describe, Create).")
@click.option("--consumer", is_flag=True, help="The ACLs a consumer needs (Read, Describe; Read on --group).")
@click.option("--idempotent", is_flag=True, help="With --producer: IdempotentWrite on the cluster too.")
@bootstrap_option
def add(
    allow,
    deny,
    allow_hosts,
    deny_hosts,
    operations,
    topics,
    groups,
    transactional_ids,
    cluster,
    pattern_type,
    producer,
    consumer,
    idempotent,
    bootstrap,
):
    """Add ACLs."""
    allow, deny = _principals(allow, "--allow-principal"), _principals(deny, "--deny-principal")
    if not allow and not deny:
        raise click.UsageError("give --allow-principal or --deny-principal")
    resources = _resources(topics, groups, transactional_ids, cluster)
    if not resources:
        raise click.UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    if (producer or consumer) and operations:
        raise click.UsageError("--producer/--consumer choose the operations: leave out --operation")
    pattern = _pattern(pattern_type, PatternType.LITERAL, (PatternType.LITERAL, PatternType.PREFIXED))
    bindings = _bindings(
        resources,
        _operations(operations),
        allow,
        deny,
        allow_hosts,
        deny_hosts,
        pattern,
        producer,
        consumer,
        idempotent,
    )

    async def work(admin):
        await admin.create_acls(bindings)

    _run(bootstrap, work)
    out.print(f"Adding ACLs: {len(bindings)}", markup=False)
    _print(bindings)


@acls.command(name="list")
@_resource_options
@click.option(
    "--principal", "principals", multiple=True, metavar="TYPE:NAME", help="Only this principal's ACLs."
)
@click.option(
    "--resource-pattern-type", "pattern_type", metavar="TYPE", help="any (default), match, literal, prefixed."
)
@bootstrap_option
def list_(topics, groups, transactional_ids, cluster, principals, pattern_type, bootstrap):
    """List ACLs (all, or those of the named resources)."""
    from onceflow.client.admin_security import AclFilter

    pattern = _pattern(
        pattern_type,
        PatternType.ANY,
        (PatternType.ANY, PatternType.MATCH, PatternType.LITERAL, PatternType.PREFIXED),
    )
    resources = _resources(topics, groups, transactional_ids, cluster)
    who = _principals(principals, "--principal") or [None]
    filters = [AclFilter(rtype, name, pattern, p) for rtype, name in resources for p in who] or [
        AclFilter(principal=p) for p in who
    ]

    async def work(admin):
        found = set()
        for f in filters:
            found.update(await admin.describe_acls(f))
        return sorted(found)

    _print(_run(bootstrap, work))


@acls.command()
@_with(_principal_options)
@_resource_options
@click.option(
    "--resource-pattern-type", "pattern_type", metavar="TYPE", help="literal (default), prefixed, any, match."
)
@click.option("--force", is_flag=True, help="Do not ask before removing every ACL of a resource.")
@bootstrap_option
def remove(
    allow,
    deny,
    allow_hosts,
    deny_hosts,
    operations,
    topics,
    groups,
    transactional_ids,
    cluster,
    pattern_type,
    force,
    bootstrap,
):
    """Remove ACLs: those given, or every ACL of the named resources."""
    from onceflow.client.admin_security import AclFilter

    resources = _resources(topics, groups, transactional_ids, cluster)
    if not resources:
        raise click.UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    pattern = _pattern(
        pattern_type,
        PatternType.LITERAL,
        (PatternType.LITERAL, PatternType.PREFIXED, PatternType.ANY, PatternType.MATCH),
    )
    allow, deny = _principals(allow, "--allow-principal"), _principals(deny, "--deny-principal")
    ops = _operations(operations) or [AclOperation.ANY]
    filters = []
    for rtype, name in resources:
        if not allow and not deny:
            if not force and not click.confirm(f"Remove every ACL of {rtype.name.lower()} {name!r}?"):
                raise click.Abort()
            filters.append(AclFilter(rtype, name, pattern))
            continue
        for principals, hosts, permission in (
            (allow, allow_hosts, PermissionType.ALLOW),
            (deny, deny_hosts, PermissionType.DENY),
        ):
            for principal in principals:
                for host in hosts or ("*",):
                    filters += [
                        AclFilter(rtype, name, pattern, principal, host, op, permission) for op in ops
                    ]

    async def work(admin):
        return await admin.delete_acls(filters)

    removed = _run(bootstrap, work)
    out.print(f"Removed ACLs: {len(removed)}", markup=False)
    _print(removed)
