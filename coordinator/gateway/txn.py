"""Transactional Kafka producers: not served yet (ApiVersions does not advertise them).

What stands in the way, for whoever builds it: txnlog's coordinator bumps a producer's
epoch at every EndTxn and starts its sequences again at 0 (KIP-890's rules), while a Kafka
client before EndTxn v5 keeps its InitProducerId epoch and continues its sequences across
transactions. Serving it needs a durable translation in the coordinator (a record of the
epoch each transactional id's Kafka client was given, and the client sequence each
coordinator epoch starts at per partition), so that any gateway, and a restarted
coordinator, map (producer id, client epoch, client sequence) the same way. An
InitProducerId with a transactional id is refused until then, so no client believes it
has exactly-once writes it does not have.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidRequestError


async def init_transactional(backend: Any, tid: str, timeout_ms: int) -> tuple[int, int]:
    raise InvalidRequestError(
        f"transactional id {tid!r}: transactional Kafka producers are not served by the "
        "gateway yet (idempotent producers are); see docs/gateway.md")
