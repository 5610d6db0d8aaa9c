"""Who may talk to the gateway: its two users, their passwords, and browsers kept out.

Users (roles) are fixed; their passwords come from settings (GPUBILL_GATEWAY_PASSWORD,
GPUBILL_GATEWAY_FINANCE_PASSWORD) or, when unset, are generated on the gateway's first
start into `<state dir>/clickhouse-gateway.credentials` (JSON, mode 0600) and printed once:

    gpubill   the pipeline: reads and writes data (workers, scheduler, invoice runs)
    finance   reads; the gateway forces readonly=1 after the client's settings, so no URL
              parameter, SETTINGS clause or SET lifts it

Credentials arrive the ways ClickHouse accepts them (HTTP Basic as clickhouse-connect and
Grafana send it, X-ClickHouse-User/-Key as clickhouse-client and DBeaver may, or the
`user`/`password` URL parameters); several ways that disagree, none, an unknown user or a
wrong password are AUTHENTICATION_FAILED (516, HTTP 401) — never a default user.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import json
import os
import secrets
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from gpubill.devenv.gateway.request import GatewayError, refusal
from gpubill.errors import ConfigError

WRITER, READER = "gpubill", "finance"
USERS = (WRITER, READER)
CREDENTIALS_FILE = "clickhouse-gateway.credentials"
AUTHENTICATION_FAILED = 516
ACCESS_DENIED = 497


@dataclass(frozen=True)
class Credentials:
    """The password of each gateway user (never logged; repr hides them)."""

    passwords: dict[str, str]

    def __repr__(self) -> str:
        return f"Credentials(users={sorted(self.passwords)})"

    def dsn(self, host: str, port: int, user: str = WRITER) -> str:
        """The GPUBILL_CLICKHOUSE value with which a gpubill command reaches the gateway as `user`."""
        from urllib.parse import quote

        host = f"[{host}]" if ":" in host else host
        return f"http://{user}:{quote(self.passwords[user], safe='')}@{host}:{port}/"


def load_credentials(home: Path, configured: dict[str, str | None]) -> tuple[Credentials, Path | None]:
    """The users' passwords: `configured` ones (from settings) first, the rest from the
    credentials file in `home`, which is created (mode 0600) with fresh random passwords
    when it does not exist. Returns the credentials and the file's path when this call
    created it (so the caller prints them once), else None.

    Raises ConfigError when the file is readable by others or not a credentials file."""
    passwords = {user: value for user, value in configured.items() if value}
    for user in passwords:
        if user not in USERS:
            raise ConfigError(f"the gateway has no user {user!r} (users: {', '.join(USERS)})")
    if all(user in passwords for user in USERS):
        return Credentials(passwords), None
    path = home / CREDENTIALS_FILE
    created = None
    try:
        stored = read_credentials_file(path)
    except FileNotFoundError:
        stored = {user: secrets.token_urlsafe(24) for user in USERS}
        home.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another gateway wrote it meanwhile: use that one
            stored = read_credentials_file(path)
        else:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(stored, out, indent=2)
                out.write("\n")
            created = path
    return Credentials({**stored, **passwords}), created


def read_credentials_file(path: Path) -> dict[str, str]:
    """The passwords in a gateway credentials file; raises FileNotFoundError when there is
    none and ConfigError when others may read it or it is not one."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "r", encoding="utf-8") as source:
        mode = os.fstat(source.fileno()).st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(f"{path} is readable by other users (mode {stat.filemode(mode)}); run: chmod 600 {path}")
        try:
            stored = json.load(source)
        except ValueError as exc:
            raise ConfigError(f"{path} is not a gateway credentials file: {exc}") from None
    if not isinstance(stored, dict) or any(not isinstance(stored.get(user), str) or not stored[user] for user in USERS):
        raise ConfigError(f"{path} is not a gateway credentials file (it needs a password for {', '.join(USERS)}); "
                          "delete it to generate a new one")
    return {user: stored[user] for user in USERS}


def authenticate(headers: dict[str, str], url_params: dict[str, str], credentials: Credentials) -> str:
    """The user a request is from (headers lower-cased). Raises GatewayError 516/401."""
    offered: set[tuple[str, str]] = set()
    authorization = headers.get("authorization")
    if authorization is not None:
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "basic":
            raise _failed("only HTTP Basic authorization is supported")
        try:
            user, sep, password = base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise _failed("the Basic authorization header is malformed") from None
        if not sep:
            raise _failed("the Basic authorization header is malformed")
        offered.add((user, password))
    if "x-clickhouse-user" in headers or "x-clickhouse-key" in headers:
        offered.add((headers.get("x-clickhouse-user", ""), headers.get("x-clickhouse-key", "")))
    if "user" in url_params or "password" in url_params:
        offered.add((url_params.get("user", ""), url_params.get("password", "")))
    if not offered:
        raise _failed("no credentials: connect as user gpubill (or finance) with its password")
    if len(offered) > 1:
        raise _failed("credentials given in several ways that disagree")
    user, password = offered.pop()
    expected = credentials.passwords.get(user)
    # compare even for an unknown user, so that the answer's timing does not tell users apart
    matches = hmac.compare_digest(password.encode(), (expected or secrets.token_urlsafe(24)).encode())
    if expected is None or not matches:
        raise _failed("password is incorrect, or there is no user with such name")
    return user


def _failed(reason: str) -> GatewayError:
    return refusal(AUTHENTICATION_FAILED, "AUTHENTICATION_FAILED", f"Authentication failed: {reason}", 401)


class BrowserGuard:
    """Keeps web pages out: a browser on the same machine can reach a loopback port, so a
    request that a page made (Origin not the gateway's own, Sec-Fetch-Site cross-site or
    same-site) or that reached us under a foreign host name (DNS rebinding) is refused."""

    def __init__(self, listen_host: str, port: int) -> None:
        self.port = port
        names = {"localhost"}
        if not _is_ip(listen_host):
            names.add(listen_host.lower())
        if not _is_loopback(listen_host):  # reachable from the network: its own name is fine too
            names.update({socket.gethostname().lower()})
        self.names = frozenset(names)

    def check(self, headers: dict[str, str]) -> None:
        """Raises GatewayError 497/403 for a request a web page made or a rebound host name."""
        host = headers.get("host")
        if host is not None and not self._own(host):
            raise _denied("the Host header does not name this gateway (a web page through DNS rebinding?)")
        fetch_site = headers.get("sec-fetch-site", "").strip().lower()
        if fetch_site not in ("", "same-origin", "none"):
            raise _denied("cross-site browser requests are refused")
        origin = headers.get("origin")
        if origin is not None:
            scheme, sep, rest = origin.strip().partition("://")
            if not sep or scheme.lower() != "http" or not self._own(rest, port_required=True):
                raise _denied("requests from web pages (an Origin header) are refused")

    def _own(self, host: str, *, port_required: bool = False) -> bool:
        name, port = _split_host(host.strip())
        if name is None or (port_required and port != self.port):  # Host: any port (a port may be mapped)
            return False
        return _is_ip(name) or name.lower().rstrip(".") in self.names


def _denied(reason: str) -> GatewayError:
    return refusal(ACCESS_DENIED, "ACCESS_DENIED", reason, 403)


def _split_host(host: str) -> tuple[str | None, int | None]:
    """'name', 'name:port', '[v6]', '[v6]:port' → (name, port); (None, None) when malformed."""
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return None, None
        name, rest = host[1:end], host[end + 1:]
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return None, None
        return name, int(rest[1:]) if rest else None
    name, sep, port = host.partition(":")
    if sep and not (port.isdigit() and len(port) <= 5):
        return None, None
    if not name:
        return None, None
    return name, int(port) if sep else None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _is_loopback(name: str) -> bool:
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
