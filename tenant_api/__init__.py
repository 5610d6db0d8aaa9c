"""The tenant API and web page (`gpubill serve`, and inside `gpubill up`).

    app.py        create_app: FastAPI routes of /v1, operations, problem JSON, access middleware
    service.py    Service: authentication, the tenant boundary, limits, every read — the one
                  place the JSON API and the web page read through; Download, Problem
    problems.py   RFC 9457 problem details
    limits.py     per-key rate, downloads in flight per key, failed sign-ins per address and key id
    connections.py  the one adapter over uvicorn's h11 protocol: request-head deadline, connection cap
    cache.py      built answers shared between requests for a few seconds (one build at a time)
    reads.py      database access from request threads (embedded: one client; server: a pool)
    records.py    access records, buffered and written every half second and at the stop
    metrics.py    /metrics
    server.py     uvicorn on a bound socket; the rules reloaded when their files change
    web.py        the web page (install(app, service)), its templates/, static/ and i18n.py
    keys.py       API keys: create, verify (one row, constant time), revoke
    access_log.py the access records in ClickHouse and their audit query
    errors.py     ApiError: keys, the access log, listening

It sits beside the worker (streams/), above reports/ and billing/, and imports neither the
worker nor the shell (gpubill/): what it needs from the settings is passed in.

docs/api.md is the user's side of it.
"""
