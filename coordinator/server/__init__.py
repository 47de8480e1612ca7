"""The coordinator process: ``txnlog coordinator``.

- ``process``: the process itself (CLI, logging, start-up and recovery, registration,
  signals, shutdown)
- ``api``: the HTTP/JSON API: routes, request parsing, the operation table, error replies
- ``http_server``: the HTTP/1.1 server (aiohttp's low-level server)
- ``request_limits``: every request typed and bounded before it reaches the coordinator
- ``admin_ops``: what Kafka's admin tools ask a broker (lists and descriptions)
- ``metrics``: the Prometheus metrics at ``GET /metrics``
- ``standby``: ``--standby``: wait until the serving coordinator is gone, then serve
"""
