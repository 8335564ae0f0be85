"""Authentication and authorization, as Kafka's broker does them (docs/security.md).

- ``config``: listeners and their protocols, TLS, SASL and authorizer settings under Kafka's names;
- ``ssl_context``: a listener's TLS server context from PEM files or text;
- ``principal``: ``KafkaPrincipal``, certificate subjects and ``ssl.principal.mapping.rules``;
- ``session``: what one connection's requests share (listener, client host, principal);
- ``sasl_authenticator`` and ``sasl_mechanisms``: the sans-IO SASL state machine and PLAIN/SCRAM;
- ``scram`` and ``credentials``: SCRAM credentials (the model is ``metadata.scram``, which a
  cluster's controller shares), their store and the KIP-554 service;
- ``acls``, ``authorizer``, ``acl_store``: ACL bindings (``metadata.acls``), Kafka's
  StandardAuthorizer, its store (a single node's file; a cluster broker's metadata image);
- ``access``: what handlers call to authorize; ``api_access``: what each API checks (the table).
"""
