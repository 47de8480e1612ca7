"""The ``txnlog`` command line, in one place.

- ``main``: the ``txnlog`` entry point and its subcommands (``dump``, ``coordinator``,
  ``gateway``, ``schema-registry``, ``merge-worker`` and the admin tools), each imported
  only when used
- ``admin_tools``: Kafka's admin tools (``topics``, ``groups``, ``transactions``,
  ``configs``, ``get-offsets``, ``delete-records``)
- ``access_tools``: ``acls`` (kafka-acls' flags), ``scram-credentials`` and
  ``principal-tokens``: the root's ACLs, SCRAM users and the coordinator's principal tokens

``python -m txnlog.coordinator.cli`` runs the same entry point (``__main__``).
"""

from .main import main

__all__ = ["main"]
