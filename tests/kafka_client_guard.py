"""No librdkafka client outlives the test that made it.

A confluent-kafka Producer or Consumer left alive keeps reconnecting, every half second,
to the ports of its test's gateway after that gateway is gone. With the suite in two
workers, the other worker may be handed one of those port numbers for a server of its
own: Spark's driver listening for its Python worker's call back read a leftover
producer's ApiVersions request as the worker's handshake and failed the stream
("Python worker failed to connect back ... Authentication failed").

Clients are kept alive past their test by reference cycles through librdkafka's C handle
(a KafkaException raised from a transactional call holds the test's frame), which the
garbage collector cannot see. So every Producer and Consumer is tracked as it is made
(``install``, before test modules import confluent_kafka's names); after each test the
ones still alive are shut down (queued messages purged, so the close cannot wait on a
broker that is gone) and the test fails, naming them: a test closes what it opens.
"""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

_live: weakref.WeakSet[Any] = weakref.WeakSet()


def install() -> None:
    """Replace confluent_kafka.Producer/Consumer with subclasses that register themselves."""
    try:
        import confluent_kafka
    except ImportError:
        return
    for name in ("Producer", "Consumer"):
        base = getattr(confluent_kafka, name)
        if getattr(base, "_tracked", False):
            continue

        def __init__(self: Any, *args: Any, _base: Any = base, **kwargs: Any) -> None:
            _base.__init__(self, *args, **kwargs)
            _live.add(self)

        def close(self: Any, *args: Any, _base: Any = base, **kwargs: Any) -> Any:
            _live.discard(self)
            return _base.close(self, *args, **kwargs)

        tracked = type(name, (base,), {"__init__": __init__, "close": close,
                                       "_tracked": True, "__module__": base.__module__})
        setattr(confluent_kafka, name, tracked)


def shut_leftovers() -> list[str]:
    """Close the clients still alive (after a collection); their descriptions."""
    if not len(_live):
        return []
    gc.collect()
    left = list(_live)
    for client in left:
        _live.discard(client)
        threading.Thread(target=close_quietly, args=(client,), daemon=True).start()
    return [type(c).__name__ for c in left]


def close_quietly(client: Any) -> None:
    """Shut ``client`` down at once: a producer's queue purged first (its close would
    wait for delivery), and the error a fenced or refused producer's close raises (its
    fatal error, again) ignored: the handle is gone either way."""
    try:
        if hasattr(client, "purge"):
            client.purge()
        client.close()
    except Exception:  # already closed, or fatal: nothing is left to shut
        pass

