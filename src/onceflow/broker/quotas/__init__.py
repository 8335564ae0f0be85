"""Client quotas (Kafka's KIP-13 byte rates, KIP-124 request percentage, KIP-546 admin APIs).

- ``entities``: who a quota is for (user, client-id, their defaults), the quota keys, validation and
  the DescribeClientQuotas filter;
- ``store``: where quotas persist (a file in the data dir today, the metadata log later);
- ``manager``: ``ClientQuotas``, the broker's service: alter and describe, and for each request the
  throttle time its client has earned, as Kafka's ClientQuotaManager computes it.
"""
