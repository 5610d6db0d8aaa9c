"""The HTTP API (FastAPI): routes, problem JSON, access records, metrics.

    create_app(settings, database, rules_provider) ─► FastAPI
        /v1/me  /v1/usage  /v1/usage/current  /v1/balance  /v1/invoices  /v1/invoices/{number}
        /v1/credit-notes  /v1/credit-notes/{number}  /v1/payments  /v1/statement
        /healthz  /readyz  /metrics  /openapi.json (tenant keys)  /openapi-operator.json  /docs
        and the web page's routes (tenant_api/web.py's `install`, when present)

Every route reads through one `Service` (tenant_api/service.py), which owns the limits and
the tenant boundary. Every error — ours, FastAPI's 404/405/422, an unexpected one — is
RFC 9457 problem JSON (tenant_api/problems.py). `AccessMiddleware` opens the access
record of each request and adds it to the recorder when it was a download or refused.
"""

from __future__ import annotations

import html
import logging
import threading
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import Any

from fastapi import Depends, FastAPI, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from tenant_api.answers import ANSWERS, figures_dict, money_text
from tenant_api.connections import ConnectionLimits
from tenant_api.metrics import ApiMetrics
from tenant_api.parameters import (
    CreditNoteNumber,
    DocumentFormat,
    Granularity,
    InvoiceNumber,
    Lang,
    Period,
    StatementFormat,
    StatementFrom,
    StatementTo,
    Tenant,
    UsageFormat,
    operator_document,
    refusal,
    tenant_document,
)
from tenant_api.problems import MEDIA_TYPE, Problem, bad_param, reason_of
from tenant_api.reads import Reads
from tenant_api.records import AccessRecorder, RequestInfo, asked, close_request, current_request, open_request
from tenant_api.service import Download, Limits, Service

__all__ = ["create_app"]

log = logging.getLogger("gpubill.api")

INTERNAL = frozenset({"/healthz", "/readyz", "/metrics", "/openapi.json", "/openapi-operator.json", "/docs"})
MAX_PARAM_CHARS = 256
API_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store", "X-Frame-Options": "DENY",
               "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'", "Referrer-Policy": "no-referrer"}


def create_app(settings: Any, database: Any, rules_provider: Callable[[], Any], *,
               service: Service | None = None) -> FastAPI:
    """The API over `database` (a warehouse Database, or a `Reads` pool) and the rule set
    `rules_provider()` returns (called per request: `gpubill up` swaps rules when they change).
    The access recorder starts with the app and flushes on its shutdown."""
    from tenant_api.access_log import record_access

    reads = database if isinstance(database, Reads) else Reads([database])
    metrics = ApiMetrics()
    if service is None:
        recorder = AccessRecorder(lambda records: reads.run(lambda db: record_access(db, records)),
                                  on_change=metrics.records)
        service = Service(reads, rules_provider, recorder, limits=Limits.from_settings(settings))

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        service.recorder.start()
        # the CJK font of Chinese PDFs, parsed and cut down once (seconds) before the first asks
        threading.Thread(target=_warm_fonts, name="gpubill-fonts", daemon=True).start()
        metrics.ready.set(1)
        try:
            yield
        finally:
            metrics.ready.set(0)
            service.recorder.close()  # what is pending is written before the database closes

    app = FastAPI(title="gpubill tenant API", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None,  # two documents, one per kind of key: _operations serves them
                  description="Usage reports, month-to-date figures, invoices and credit notes of one tenant, for "
                              "its API keys (`Authorization: Bearer gpb_...`). Errors are RFC 9457 problem JSON. "
                              "See docs/api.md.")
    app.state.service = service
    app.state.connection_limits = ConnectionLimits.from_settings(settings)  # what ApiServer.attach serves within
    app.state.metrics = metrics
    _problems(app, service)
    _api_routes(app, service)
    _operations(app, service, metrics)
    app.add_middleware(AccessMiddleware, recorder=service.recorder, metrics=metrics)
    try:
        from tenant_api import web
    except ImportError as exc:  # the page is optional; the API serves without it
        if exc.name != "tenant_api.web":
            raise
    else:
        web.install(app, service)
    return app


def _warm_fonts() -> None:
    from reports.render.fonts import warm_up

    try:
        log.info("PDF fonts: %s", warm_up())
    except Exception as exc:  # noqa: BLE001 - without it Chinese PDFs are slower, or name the missing font
        log.warning("PDF fonts not warmed up: %s", exc)


# -- the routes of /v1 -------------------------------------------------------------------

def _params(*allowed: str) -> Callable[[Request], None]:
    """A dependency refusing (400, naming it) a parameter the route does not take, one given
    twice, or one longer than MAX_PARAM_CHARS: a typo must not silently fall back to a default."""
    names = frozenset(allowed)

    def check(request: Request) -> None:
        seen: set[str] = set()
        for name, value in request.query_params.multi_items():
            shown = name if len(name) <= 40 and name.isprintable() else repr(name[:40])
            if name not in names:
                raise bad_param(shown, f"unknown parameter; this route takes {', '.join(sorted(names)) or 'none'}")
            if name in seen:
                raise bad_param(name, "given more than once")
            if len(value) > MAX_PARAM_CHARS:
                raise bad_param(name, f"longer than {MAX_PARAM_CHARS} characters")
            seen.add(name)
    return check


def _bearer(request: Request) -> str:
    values = request.headers.getlist("authorization")
    if len(values) > 1:
        return "\x00several"  # malformed: never a key
    if not values:
        return ""
    scheme, _, token = values[0].strip().partition(" ")
    if scheme.lower() != "bearer":
        return "\x00scheme"
    return token.strip()


def _api_routes(app: FastAPI, service: Service) -> None:
    def key_of(request: Request):
        client = request.client.host if request.client else ""
        return service.authenticate(_bearer(request), client)

    problem_responses = {code: {"description": text, "content": {MEDIA_TYPE: {}}} for code, text in (
        (400, "a parameter is wrong (`param` names it)"), (401, "no key, or one not valid"),
        (404, "no such thing (another tenant's too)"), (429, "over a limit; see Retry-After"))}

    # declared (the documents say every /v1 route needs a Bearer key); key_of reads the header itself
    auth = Security(HTTPBearer(auto_error=False, description="an API key: `Authorization: Bearer gpb_...`"))

    def answer(path: str) -> dict:
        """The problem answers, and the 200 body of `path` as tenant_api/answers.py declares it."""
        return problem_responses | {200: {"model": ANSWERS[path], "description": "the answer"}}

    @app.get("/v1/me", dependencies=[Depends(_params()), auth], responses=answer("/v1/me"), tags=["tenant"])
    def me(key=Depends(key_of)) -> JSONResponse:
        """The tenant of the key, its display name, the key's id, role, label and expiry."""
        return _json(service.me(key))

    @app.get("/v1/usage", dependencies=[Depends(_params("period", "format", "granularity", "lang", "tenant")), auth],
             responses=problem_responses | {200: {"description": "the report file", "content": {
                 "text/csv": {}, "application/json": {}, "application/pdf": {}, "application/vnd.apache.parquet": {}}}},
             tags=["tenant"])
    def usage(period: Period, format: UsageFormat = "csv", granularity: Granularity = "day",  # noqa: A002
              lang: Lang = "en", tenant: Tenant = None, key=Depends(key_of)) -> Response:
        """The usage report of a billing period per day (or hour), instance and GPU, as
        `gpubill report usage` writes it."""
        return _file(service.usage_download(key, service.tenant_for(key, tenant), period, format, granularity, lang))

    @app.get("/v1/usage/current", dependencies=[Depends(_params("tenant")), auth], responses=answer("/v1/usage/current"),
             tags=["tenant"])
    def usage_current(tenant: Tenant = None, key=Depends(key_of)) -> JSONResponse:
        """Month to date: GPU-hours, kWh, rent, electricity, credits and the estimated total with
        VAT — an estimate until the period is invoiced — and the time of the newest data included."""
        one = service.tenant_for(key, tenant)
        return _json({**_current_dict(service.current(key, one)), "stream": _live_dict(service.live(key, one))})

    @app.get("/v1/balance", dependencies=[Depends(_params("tenant")), auth], responses=answer("/v1/balance"),
             tags=["tenant"])
    def balance(tenant: Tenant = None, key=Depends(key_of)) -> JSONResponse:
        """The balance: top-ups less issued invoices (net of credit notes) less the estimates of every period
        not invoiced yet (with credits and VAT), the monthly budget's used share, the last hour's
        burn and the runway at it (docs/balances.md). `prepaid` says whether the tenant has top-ups; a
        postpaid tenant's negative balance is what it is charged (`owed`). What its issued invoices still
        ask today (`outstanding`), the part past its due dates (`past_due`) and the credit it holds
        (`unapplied`). Money as strings, two decimals, CNY."""
        one = service.tenant_for(key, tenant)
        figures = _balance_dict(service.balance(key, one))
        return _json({**figures, **_account_dict(service.account(key, one)), "stream": _live_dict(service.live(key, one))})

    @app.get("/v1/invoices", dependencies=[Depends(_params("tenant")), auth], responses=answer("/v1/invoices"),
             tags=["tenant"])
    def invoices(tenant: Tenant = None, key=Depends(key_of)) -> JSONResponse:
        """The tenant's invoices, newest first (money as strings, two decimals, CNY)."""
        return _json({"invoices": service.invoices(key, service.tenant_for(key, tenant))})

    @app.get("/v1/invoices/{number}", dependencies=[Depends(_params("format", "lang", "tenant")), auth],
             responses=problem_responses | {200: {"description": "the invoice", "content": {
                 "application/json": {}, "text/csv": {}, "application/pdf": {}}}}, tags=["tenant"])
    def invoice(number: InvoiceNumber, format: DocumentFormat = "json", lang: Lang = "en",  # noqa: A002
                tenant: Tenant = None, key=Depends(key_of)) -> Response:
        """One invoice by number as json, csv or pdf. A voided invoice is that invoice, marked voided,
        never its replacement."""
        return _file(service.invoice_download(key, service.tenant_for(key, tenant), number, format, lang))

    @app.get("/v1/credit-notes", dependencies=[Depends(_params("tenant")), auth], responses=answer("/v1/credit-notes"),
             tags=["tenant"])
    def credit_notes(tenant: Tenant = None, key=Depends(key_of)) -> JSONResponse:
        """The tenant's credit notes, newest first: the invoice each corrects, why, what it credits
        before tax, the VAT reversed and the total credited — to the prepaid balance, or against what a
        postpaid tenant owes (money as strings, two decimals, CNY)."""
        return _json({"credit_notes": service.credit_notes(key, service.tenant_for(key, tenant))})

    @app.get("/v1/credit-notes/{number}", dependencies=[Depends(_params("format", "lang", "tenant")), auth],
             responses=problem_responses | {200: {"description": "the credit note", "content": {
                 "application/json": {}, "text/csv": {}, "application/pdf": {}}}}, tags=["tenant"])
    def credit_note(number: CreditNoteNumber, format: DocumentFormat = "json", lang: Lang = "en",  # noqa: A002
                    tenant: Tenant = None, key=Depends(key_of)) -> Response:
        """One credit note by number as json, csv or pdf."""
        return _file(service.credit_note_download(key, service.tenant_for(key, tenant), number, format, lang))

    @app.get("/v1/payments", dependencies=[Depends(_params("tenant")), auth], responses=answer("/v1/payments"),
             tags=["tenant"])
    def payments(tenant: Tenant = None, key=Depends(key_of)) -> JSONResponse:
        """The tenant's payments (its top-ups too), newest first: the reference, the amount, how and when it
        was received, what of it went to which invoice, what is held as credit, and when it was reversed
        (money as strings, two decimals, CNY)."""
        return _json({"payments": service.payments(key, service.tenant_for(key, tenant))})

    @app.get("/v1/statement", dependencies=[Depends(_params("from", "to", "format", "lang", "tenant")), auth],
             responses=problem_responses | {200: {"model": ANSWERS["/v1/statement"], "description": "the statement",
                                                  "content": {"text/csv": {}, "application/pdf": {}}}},
             tags=["tenant"])
    def statement(start: StatementFrom = None, to: StatementTo = None,  # type: ignore[assignment]
                  format: StatementFormat = "json", lang: Lang = "en", tenant: Tenant = None,  # noqa: A002
                  key=Depends(key_of)) -> Response:
        """The statement of account (对账单) from `from` to `to` (default: this month to date) as json, csv or
        pdf, as `gpubill statement` writes it: what the tenant owed before (`opening_balance`; negative:
        credit held), each invoice, credit note, payment, refund and write-off with the running balance,
        what it owes after (`closing_balance`) and the aging of that as of `to`."""
        one = service.tenant_for(key, tenant)
        return _file(service.statement_download(key, one, start, to, format, lang))


def _live_dict(live: Any) -> dict | None:
    """The stream's figures (billing.live_spend.LivePosition) as JSON, or None (null) when no
    worker priced the tenant in the last minute."""
    if live is None:
        return None
    names = ("month_to_date", "before_credits", "budget", "balance", "runway_hours")
    money = {name: None if getattr(live, name) is None else figures_dict({name: getattr(live, name)})[name]
             for name in names}
    return {"period": live.period, **money, "as_of": live.as_of.isoformat(timespec="milliseconds").replace("+00:00", "Z")}


def _current_dict(figures: Any, *, estimate: bool | None = True) -> dict:
    """A frozen dataclass of figures as JSON: Decimals as strings, times as UTC RFC 3339;
    with `estimate`, whether the figures are an estimate (not invoiced)."""
    out = figures_dict(figures)  # one number format: tenant_api/answers.py
    if estimate:
        out["estimate"] = not figures.invoiced
    out["currency"] = "CNY"
    return out


def _balance_dict(figures: Any) -> dict:
    out = _current_dict(figures, estimate=None)
    out["prepaid"], out["owed"] = figures.prepaid, money_text(figures.owed)
    out["estimates"] = [{"period": e.period, "total": money_text(e.total), "closed": e.closed} for e in figures.estimates]
    return out


def _account_dict(account: Any) -> dict:
    return {name: money_text(getattr(account, name)) for name in ("outstanding", "past_due", "unapplied")}


def _json(body: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status)


def _file(download: Download) -> Response:
    # the name is made of id characters only (reports.outputs.output_name): safe in the header as is
    return Response(download.body, media_type=download.media_type, headers={
        "Content-Disposition": f'attachment; filename="{download.filename}"'})


# -- operations: health, readiness, metrics, the API's own documents ----------------------

def _operations(app: FastAPI, service: Service, metrics: ApiMetrics) -> None:
    @app.get("/healthz", tags=["operations"])
    def healthz() -> JSONResponse:
        """The process answers."""
        return _json({"status": "ok"})

    @app.get("/readyz", tags=["operations"])
    def readyz() -> JSONResponse:
        """The database answers, the rules are loaded and the access log is being written (else 503)."""
        checks = service.ready()
        ready = all(value == "ok" for value in checks.values())
        return _json({"status": "ok" if ready else "unavailable", "checks": checks}, 200 if ready else 503)

    @app.get("/metrics", tags=["operations"], response_class=Response)
    def prometheus() -> Response:
        """Prometheus text: requests per route and status, latency, access records pending."""
        return Response(metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/openapi.json", include_in_schema=False)
    def openapi_tenant() -> JSONResponse:
        """The OpenAPI document for tenant keys (tenant_api/parameters.py says why there are two)."""
        return _json(tenant_document(app.openapi()))

    @app.get("/openapi-operator.json", include_in_schema=False)
    def openapi_operator() -> JSONResponse:
        """The OpenAPI document for operator keys: `tenant` required."""
        return _json(operator_document(app.openapi()))

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return HTMLResponse(_docs_page(app.openapi()))


def _docs_page(spec: dict) -> str:
    """The OpenAPI document as one plain page (no script, nothing fetched from a CDN)."""
    rows = []
    for path, operations in spec.get("paths", {}).items():
        for method, operation in operations.items():
            params = ", ".join(p["name"] for p in operation.get("parameters", []))
            rows.append(f"<tr><td><code>{html.escape(method.upper())} {html.escape(path)}</code></td>"
                        f"<td>{html.escape(params)}</td><td>{html.escape(operation.get('description') or operation.get('summary') or '')}</td></tr>")
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>gpubill API</title>"
            "<style>body{font-family:sans-serif;margin:2em;max-width:70em}td{border-top:1px solid #ddd;"
            "padding:.4em;vertical-align:top}</style></head><body>"
            f"<h1>{html.escape(spec['info']['title'])}</h1><p>{html.escape(spec['info'].get('description', ''))}</p>"
            "<p>Machine-readable: <a href='/openapi.json'>/openapi.json</a> (tenant keys), "
            "<a href='/openapi-operator.json'>/openapi-operator.json</a> (operator keys)</p><table><tr><th>route</th>"
            f"<th>parameters</th><th>what</th></tr>{''.join(rows)}</table></body></html>")


# -- problems ------------------------------------------------------------------------------

def problem_response(problem: Problem, request: Request | None = None) -> Response:
    info = current_request()
    info.reason = problem.reason
    headers = {**problem.headers}
    return Response(problem.body(), status_code=problem.status, media_type=MEDIA_TYPE, headers=headers)


def _problems(app: FastAPI, service: Service) -> None:
    from billing.errors import NotFound
    from warehouse.errors import WarehouseError

    @app.exception_handler(Problem)
    async def on_problem(request: Request, exc: Problem) -> Response:
        return problem_response(exc, request)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: StarletteHTTPException) -> Response:
        detail = {404: "no such route: see /docs or /openapi.json",
                  405: f"{request.method} is not allowed here"}.get(exc.status_code, str(exc.detail))
        return problem_response(Problem(exc.status_code, detail, headers=exc.headers or {}), request)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> Response:
        return problem_response(refusal((exc.errors() or [{}])[0]), request)

    @app.exception_handler(NotFound)
    async def on_not_found(request: Request, exc: NotFound) -> Response:
        return problem_response(Problem(404, "not found", reason="not-found"), request)

    @app.exception_handler(WarehouseError)
    async def on_database(request: Request, exc: WarehouseError) -> Response:
        log.error("database error answering %s: %s", request.url.path, exc)
        return problem_response(Problem(503, "the database cannot be read just now; try again in a minute",
                                        headers={"Retry-After": "30"}, reason="db-error"), request)

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error answering %s", request.url.path)
        return problem_response(Problem(500, "an unexpected error; it is logged for the operator", reason="error"),
                                request)


class AccessMiddleware:
    """Opens each request's access record, adds it to the recorder when the answer was a
    download or a refusal, and counts the request in the metrics. Pure ASGI (no buffering)."""

    def __init__(self, app, recorder: AccessRecorder, metrics: ApiMetrics) -> None:
        self.app, self.recorder, self.metrics = app, recorder, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client") or ("", 0)
        path = scope.get("path", "")
        period, fmt = asked(scope.get("query_string", b""))  # what was asked: a refusal's record says so
        info = RequestInfo(method=scope.get("method", ""), what=path, client=str(client[0] or ""), period=period,
                           fmt=fmt)
        token = open_request(info)
        status = 500
        started = time.perf_counter()
        is_api = path.startswith("/v1/") or path in INTERNAL  # the page's routes set their own headers

        async def sending(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                # how long the server took to the first byte of its answer (`gpubill bench api` reads it)
                elapsed_ms = (time.perf_counter() - started) * 1000
                message.setdefault("headers", []).append((b"server-timing", f"app;dur={elapsed_ms:.1f}".encode()))
                if is_api:
                    headers = message.setdefault("headers", [])
                    present = {name.lower() for name, _ in headers}
                    for name, value in API_HEADERS.items():
                        if name.lower().encode() not in present:
                            headers.append((name.lower().encode(), value.encode()))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            label = getattr(route, "path", None) or "unmatched"
            self.metrics.requests.labels(label, str(status)).inc()
            self.metrics.seconds.labels(label).observe(time.perf_counter() - started)
            if info.download and status < 400:
                self.metrics.download_bytes.inc(info.bytes)
            if path not in INTERNAL and (info.download or status >= 400):
                if status >= 400:
                    info.bytes = 0
                    info.reason = info.reason or reason_of(status)  # the page's own refusals too
                self.recorder.record(info, status)
            close_request(token)
