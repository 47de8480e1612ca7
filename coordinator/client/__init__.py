"""Everything that talks to a coordinator: the clients, never the server's modules.

- ``coordinator_client``: ``CoordinatorClient``, the synchronous HTTP client
- ``segment_writer``: the one write path of every producer: reserve, stamp, put-if-absent,
  confirm
- ``producer``: Kafka's producer API in Python (``TransactionalProducer``,
  ``IdempotentProducer``)
- ``admin_client``: ``AdminClient``, Kafka's AdminClient for a txnlog root
- ``embedded``: find the root's coordinator, or start one (the zero-set-up default)

``from txnlog.coordinator.client import CoordinatorClient`` keeps working: the client class
and its unavailability error are re-exported here (they import nothing heavy).
"""

from .coordinator_client import CoordinatorClient, CoordinatorUnavailableError

__all__ = ["CoordinatorClient", "CoordinatorUnavailableError"]
