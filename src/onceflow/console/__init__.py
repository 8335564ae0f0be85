"""onceflow's web console: a cluster's brokers, topics, messages, groups, transactions and producers
in a browser, for any Kafka-protocol broker (``onceflow console --bootstrap-server ...``).

Server-rendered (Starlette + Jinja2, served by uvicorn): :mod:`.app` has the routes and error pages,
:mod:`.cluster` gathers what the pages show through the admin client, :mod:`.browse` is the message
browser, :mod:`.metrics_feed` reads the broker's Prometheus endpoint for the charts. Needs the
``console`` extra (``pip install 'onceflow[console]'``).
"""

from onceflow.console.app import ConsoleSettings, create_app

__all__ = ["ConsoleSettings", "create_app"]
