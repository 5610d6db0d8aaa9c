"""Errors of the tenant API's own work (keys, the access log, serving): one line each.

    ApiError                   base; the CLI prints str(exc) and exits 1
    ├── ListenRefused          the address cannot be listened on (taken, not ours, malformed)
    ├── UnknownKeyId           a revoke of a well-formed key id that does not exist
    ├── InvalidKeyRequest      (tenant_api/keys.py) who may hold a key: malformed tenant, role, expiry
    ├── KeyRefused             (tenant_api/keys.py) a presented key is malformed, unknown, revoked or expired
    └── InvalidAuditQuery      (tenant_api/access_log.py) a malformed access-log query

What a request did wrong is not an error here but an answer: problem JSON (tenant_api/problems.py).
"""


class ApiError(Exception):
    """Base of every error of the tenant API package."""


class ListenRefused(ApiError):
    """`--listen` is malformed, or its address is taken or not this host's."""


class UnknownKeyId(ApiError):
    """A well-formed key id that names no key."""
