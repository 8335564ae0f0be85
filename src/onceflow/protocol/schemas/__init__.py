"""Message schemas kafka-python does not ship, in Kafka's JSON schema format (the same format its
``ApiMessage`` classes load): written from the Kafka protocol's field lists for the APIs we serve."""
