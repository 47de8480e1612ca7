"""The data source's own error type, apart from the modules that raise it.

``options`` and ``kafka_options`` both refuse options, and ``options`` hands Spark's Kafka
options to ``kafka_options`` for translation; the error lives here so neither of them
imports the other for it.
"""

from __future__ import annotations

from txnlog.log_format.errors import TxnlogError


class InvalidOptionError(TxnlogError, ValueError):
    """An option the data source does not know, or a value it cannot use."""
