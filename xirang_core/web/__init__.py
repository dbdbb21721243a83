"""The web stack the pool service and the console share: uvicorn serving an ASGI app with
limits on connections, headers, bodies and time (:mod:`.server`, :mod:`.limits`), and the
validated field types and error answers of their APIs (:mod:`.fields`)."""
