"""The customer web page at ``/``: sign in with an API key, this month's figures, a chart of
daily GPU-hours and spend, the invoices (a voided one marked, with what replaced it; what each
has been paid, what it still asks, overdue), the statement of account, the payments, the credit
notes and usage reports to download — in English and Simplified Chinese.
Server-rendered (Jinja2), one small script, nothing from the network.

The page's routes and what they render are one request flow (session, CSRF, tenant, render,
security headers) read top to bottom; sessions, words, the chart and the rows of its tables
are modules of their own, and the small helpers at the bottom serve this page only.

    GET  /                          sign-in form, or the tenant's page (?period=YYYY-MM, ?lang=,
                                    the statement's ?from=YYYY-MM-DD&to=YYYY-MM-DD: default this month)
    POST /session                   sign in (form: key, csrf)           → 303 /
    POST /session/end               sign out (form: csrf)               → 303 /?m=signed_out
    POST /tenant                    an operator key picks the tenant it views (form: tenant, csrf)
    GET  /files/usage               a usage report (period, format, granularity) in the page's language
    GET  /files/invoices/{number}   an invoice (format) in the page's language
    GET  /files/credit-notes/{number}  a credit note (format) in the page's language
    GET  /files/statement           the statement of account (from, to, format) in the page's language
    GET  /assets/{name}             the stylesheet, script and logo (content-hashed, cached a year)

Everything is read through the API's ``Service`` (``tenant_api/service.py``) exactly as the
JSON API reads it: the same key checks, tenant boundary, limits and access records. Sessions
and CSRF are in ``web_session.py``; the words in ``i18n.py``; the chart's geometry in
``web_chart.py``; the rows of the summary, invoices and credit notes in ``web_rows.py``.

Operator keys (support desk) choose the tenant by typing its id in a small form on the page;
the choice is kept in the server-side session (Service.tenant_for checks it) and every read
and download then is for that tenant.

Every response of these routes carries the page's security headers: a CSP with no inline
script or style (``script-src 'self'``), ``frame-ancestors 'none'`` and X-Frame-Options,
nosniff, ``Referrer-Policy: same-origin`` (not no-referrer: a browser then sends
``Origin: null`` on our own form posts, which the CSRF check must refuse), and
``Cache-Control: no-store`` on anything with a tenant's data.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from billing.errors import NotFound
from tenant_api.i18n import LANG_NAMES, LANGS, Words, money, number, pick_lang
from tenant_api.problems import Problem
from tenant_api.web_chart import build_chart
from tenant_api.web_rows import credit_note_row, expiry, invoice_row, payment_row, statement_view, summary
from tenant_api.web_session import Session, Sessions, SessionsFull, new_token, same_origin, tokens_match

__all__ = ["SECURITY_HEADERS", "install"]

HERE = Path(__file__).parent
SESSION_COOKIE = "gpubill_session"
LOGIN_COOKIE = "gpubill_login"
LANG_COOKIE = "gpubill_lang"
LOGIN_MAX_AGE_S = 3600
PERIOD = re.compile(r"\d{4}-(0[1-9]|1[0-2])")
DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
USAGE_FORMATS = ("csv", "json", "parquet", "pdf")
PERIODS_SHOWN = 12
MAX_KEY_CHARS = 256

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=(), usb=()",
}
ASSET_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
               ".svg": "image/svg+xml"}


@dataclass(frozen=True)
class Asset:
    body: bytes
    media_type: str
    version: str  # a hash of the body: the URL changes when the file does, so it may be cached for good


def _assets() -> dict[str, Asset]:
    found = {}
    for path in sorted((HERE / "static").iterdir()):
        if path.suffix in ASSET_TYPES and path.is_file():
            body = path.read_bytes()
            found[path.name] = Asset(body, ASSET_TYPES[path.suffix], hashlib.sha256(body).hexdigest()[:12])
    return found


def _environment(assets: Mapping[str, Asset]) -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.globals["asset"] = lambda name: f"/assets/{name}?v={assets[name].version}"
    return env


def install(app: FastAPI, service: Any, *, sessions: Sessions | None = None) -> None:
    """Add the page's routes to `app`, reading through `service` (tenant_api.service.Service)."""
    Page(service, sessions if sessions is not None else Sessions()).routes(app)


class Page:
    """The page's routes over one Service and one table of sessions."""

    def __init__(self, service: Any, sessions: Sessions) -> None:
        self.service = service
        self.sessions = sessions
        self.assets = _assets()
        self.env = _environment(self.assets)

    # -- routes -------------------------------------------------------------------------

    def routes(self, app: FastAPI) -> None:
        app.add_api_route("/", self.home, methods=["GET"], include_in_schema=False)
        app.add_api_route("/session", self.sign_in, methods=["POST"], include_in_schema=False)
        app.add_api_route("/session/end", self.sign_out, methods=["POST"], include_in_schema=False)
        app.add_api_route("/tenant", self.choose_tenant, methods=["POST"], include_in_schema=False)
        app.add_api_route("/files/usage", self.usage_file, methods=["GET"], include_in_schema=False)
        app.add_api_route("/files/invoices/{number}", self.invoice_file, methods=["GET"], include_in_schema=False)
        app.add_api_route("/files/credit-notes/{number}", self.credit_note_file, methods=["GET"],
                          include_in_schema=False)
        app.add_api_route("/files/statement", self.statement_file, methods=["GET"], include_in_schema=False)
        app.add_api_route("/assets/{name}", self.asset, methods=["GET"], include_in_schema=False)

    def home(self, request: Request) -> Response:
        lang = self._lang(request)
        session_id = request.cookies.get(SESSION_COOKIE)
        session = self.sessions.find(session_id)
        notice = {"signed_out": "signed_out", "ended": "ended"}.get(request.query_params.get("m", ""))
        if session is None:
            return self._sign_in_page(request, lang, notice=notice, kind="info", forget=bool(session_id))
        try:
            key = self.service.authenticate(session.token, _client(request))
        except Problem as problem:
            return self._refused(request, lang, problem, session_id)
        try:
            return self._dashboard(request, lang, session, key)
        except Problem as problem:
            return self._error(request, lang, problem)

    def sign_in(self, request: Request, key: str = Form(""), csrf: str = Form("")) -> Response:
        lang = self._lang(request)
        if not self._from_this_page(request) or not tokens_match(request.cookies.get(LOGIN_COOKIE), csrf):
            return self._sign_in_page(request, lang, notice="form_expired", status=403)
        token = key.strip()
        if not token or len(token) > MAX_KEY_CHARS:
            return self._sign_in_page(request, lang, notice="empty_key" if not token else "refused", status=400)
        try:
            verified = self.service.authenticate(token, _client(request))
        except Problem as problem:
            return self._refused(request, lang, problem, None)
        # a new session every time: a cookie planted before sign-in is never promoted (fixation)
        self.sessions.end(request.cookies.get(SESSION_COOKIE))
        try:
            session_id, _ = self.sessions.start(token, key_id=verified.id, tenant=verified.tenant)
        except SessionsFull:
            response = self._sign_in_page(request, lang, notice="sessions_full", status=503)
            response.headers["Retry-After"] = "300"
            return response
        response = RedirectResponse("/", status_code=303)
        _set_cookie(response, request, SESSION_COOKIE, session_id, max_age=None)
        response.delete_cookie(LOGIN_COOKIE, path="/", secure=_https(request), httponly=True, samesite="strict")
        return self._headers(response, request)

    def sign_out(self, request: Request, csrf: str = Form("")) -> Response:
        session_id = request.cookies.get(SESSION_COOKIE)
        session = self.sessions.find(session_id)
        if session is not None and not self._csrf_ok(request, session, csrf):
            return self._error(request, self._lang(request), Problem(403, "form", reason="csrf"), notice="form_expired")
        self.sessions.end(session_id)
        response = RedirectResponse("/?m=signed_out", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/", secure=_https(request), httponly=True, samesite="strict")
        return self._headers(response, request)

    def choose_tenant(self, request: Request, tenant: str = Form(""), csrf: str = Form("")) -> Response:
        lang = self._lang(request)
        session_id = request.cookies.get(SESSION_COOKIE)
        session = self.sessions.find(session_id)
        if session is None:
            return self._redirect_signed_out(request)
        if not self._csrf_ok(request, session, csrf):
            return self._error(request, lang, Problem(403, "form", reason="csrf"), notice="form_expired")
        try:
            key = self.service.authenticate(session.token, _client(request))
            session.tenant = self.service.tenant_for(key, tenant.strip()) if key.role == "operator" else None
        except Problem as problem:
            return self._refused(request, lang, problem, session_id)
        return self._headers(RedirectResponse("/", status_code=303), request)

    def usage_file(self, request: Request) -> Response:
        params = request.query_params
        return self._file(request, lambda key, tenant, lang: self.service.usage_download(
            key, tenant, params.get("period"), params.get("format"), params.get("granularity") or "day", lang))

    def invoice_file(self, request: Request, number: str) -> Response:
        fmt = request.query_params.get("format")
        return self._file(request, lambda key, tenant, lang: self.service.invoice_download(
            key, tenant, number, fmt, lang))

    def credit_note_file(self, request: Request, number: str) -> Response:
        fmt = request.query_params.get("format")
        return self._file(request, lambda key, tenant, lang: self.service.credit_note_download(
            key, tenant, number, fmt, lang))

    def statement_file(self, request: Request) -> Response:
        params = request.query_params
        return self._file(request, lambda key, tenant, lang: self.service.statement_download(
            key, tenant, params.get("from") or None, params.get("to") or None, params.get("format"), lang))

    def asset(self, request: Request, name: str) -> Response:
        found = self.assets.get(name)
        if found is None:
            return self._error(request, self._lang(request), Problem(404, "no such file", reason="not-found"))
        response = Response(found.body, media_type=found.media_type,
                            headers={"Cache-Control": "public, max-age=31536000, immutable",
                                     "ETag": f'"{found.version}"'})
        return self._headers(response, request, cache=False)

    # -- what the routes share ------------------------------------------------------------

    def _file(self, request: Request, fetch) -> Response:
        lang = self._lang(request)
        session_id = request.cookies.get(SESSION_COOKIE)
        session = self.sessions.find(session_id)
        if session is None:
            return self._redirect_signed_out(request)
        try:
            key = self.service.authenticate(session.token, _client(request))
            download = fetch(key, self._tenant(key, session), lang)
        except Problem as problem:
            return self._refused(request, lang, problem, session_id)
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", download.filename)[:200] or "download"
        response = Response(download.body, media_type=download.media_type,
                            headers={"Content-Disposition": f'attachment; filename="{safe}"'})
        return self._headers(response, request)

    def _tenant(self, key: Any, session: Session) -> str | None:
        """The tenant the page shows: a tenant key's own; an operator's choice (None until made)."""
        if key.role == "operator":
            return self.service.tenant_for(key, session.tenant) if session.tenant else None
        return self.service.tenant_for(key, None)

    def _dashboard(self, request: Request, lang: str, session: Session, key: Any) -> Response:
        t = Words(lang)
        tenant = self._tenant(key, session)
        me = self.service.me(key)
        operator = key.role == "operator"
        account = {"name": me.get("display_name") or "", "tenant": tenant or "", "key_id": me.get("key_id", ""),
                   "label": me.get("label") or "", "expiry": expiry(t, me.get("expires_at"))}
        if operator:
            account["name"] = tenant or ""
        context: dict[str, Any] = {"account": account, "operator": operator, "tenant": tenant, "summary": None,
                                   "csrf": session.csrf, "notice": None, "notice_kind": "info"}
        if tenant is not None:
            current = self.service.current(key, tenant)
            wanted = request.query_params.get("period", "")
            invoices = self.service.invoices(key, tenant)
            # the months with data: invoiced ones, and the current one when it has usage (not a whole year)
            periods = {i["period"] for i in invoices if PERIOD.fullmatch(str(i.get("period")))}
            if current.newest_data_at is not None or not periods:
                periods.add(current.period)
            periods = sorted(periods, reverse=True)
            chart_period = wanted if wanted in periods else periods[0]  # the latest month with data
            daily = self.service.daily(key, tenant, chart_period)
            context.update(summary=summary(t, current), periods=periods, chart_period=chart_period,
                           chart=build_chart(chart_period, daily, hours_word=t("chart_hours")),
                           invoices=[invoice_row(t, i) for i in invoices], usage_formats=USAGE_FORMATS,
                           credit_notes=[credit_note_row(t, n) for n in self.service.credit_notes(key, tenant)],
                           payments=[payment_row(t, p) for p in self.service.payments(key, tenant)],
                           money_left=self._money_left(t, lang, key, tenant),
                           **self._statement(t, request, key, tenant, chart_period))
        return self._render(request, "dashboard.html", lang, context)

    def _statement(self, t: Words, request: Request, key: Any, tenant: str, chart_period: str) -> dict[str, Any]:
        """The statement section: the range asked (?from=&to=, each optional; default this month) or,
        for a range the Service refuses (malformed, from after to) or a tenant it does not know, the words
        to say so and the form."""
        params = request.query_params
        start, end = params.get("from") or None, params.get("to") or None
        try:
            statement = statement_view(t, self.service.statement(key, tenant, start, end).statement)
        except Problem as problem:
            if problem.status not in (400, 404):  # 404: an operator viewing a tenant nobody registered
                raise
            return {"statement": None, "statement_error": t("statement_bad_range" if problem.status == 400 else "not_found"),
                    "statement_form": {"start": start if start and DAY.fullmatch(start) else "",
                                       "end": end if end and DAY.fullmatch(end) else "", "period": chart_period}}
        return {"statement": statement, "statement_error": None,
                "statement_form": {"start": statement["start"], "end": statement["end"], "period": chart_period}}

    def _sign_in_page(self, request: Request, lang: str, *, notice: str | None = None, kind: str = "error",
                      status: int = 200, forget: bool = False, extra: Mapping[str, Any] | None = None) -> Response:
        t = Words(lang)
        login_token = request.cookies.get(LOGIN_COOKIE) or ""
        if len(login_token) != 43:
            login_token = new_token()
        text = t(notice, **(extra or {})) if notice else None
        response = self._render(request, "signin.html", lang, {
            "login_token": login_token, "csrf": None, "notice": text, "notice_kind": kind}, status=status)
        _set_cookie(response, request, LOGIN_COOKIE, login_token, max_age=LOGIN_MAX_AGE_S)
        if forget:
            response.delete_cookie(SESSION_COOKIE, path="/", secure=_https(request), httponly=True, samesite="strict")
        return response

    def _refused(self, request: Request, lang: str, problem: Problem, session_id: str | None) -> Response:
        """A key refused at sign-in (no session yet) or mid-session (the session ends)."""
        if problem.status == 401:
            self.sessions.end(session_id)
            return self._sign_in_page(request, lang, notice="ended" if session_id else "refused", status=401,
                                      forget=session_id is not None)
        if problem.status == 429:  # slowed down, not signed out: the session (if any) stays
            seconds = problem.headers.get("Retry-After", "60")
            extra = {"seconds": seconds}
            response = (self._sign_in_page(request, lang, notice="too_many", status=429, extra=extra)
                        if session_id is None else self._error(request, lang, problem, notice="too_many", extra=extra))
            response.headers["Retry-After"] = seconds
            return response
        return self._error(request, lang, problem)

    def _error(self, request: Request, lang: str, problem: Problem, *, notice: str | None = None,
               extra: Mapping[str, Any] | None = None) -> Response:
        t = Words(lang)
        # the service's own words (English) only where they name what to fix: a bad parameter
        notice = notice or {404: "not_found", 500: "unavailable", 503: "unavailable"}.get(problem.status)
        message = t(notice, **(extra or {})) if notice else problem.detail
        response = self._render(request, "error.html", lang, {"status": problem.status, "message": message,
                                                               "csrf": None}, status=problem.status)
        for name, value in problem.headers.items():
            if name.lower() == "retry-after":
                response.headers[name] = value
        return response

    def _redirect_signed_out(self, request: Request) -> Response:
        response = RedirectResponse("/?m=ended", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/", secure=_https(request), httponly=True, samesite="strict")
        return self._headers(response, request)

    def _money_left(self, t: Words, lang: str, key: Any, tenant: str) -> dict[str, Any]:
        """The balance, the runway at the last hour's spend and the credits left, for the page; for a
        postpaid tenant (no top-ups) what it is charged instead of a negative "prepaid balance"."""
        try:
            figures = self.service.balance(key, tenant)
        except NotFound:  # an operator looking at a tenant that is not registered: it has no balance
            return {"balance": None, "runway": "", "credits": []}
        except Problem as problem:  # the Service says so as a 404
            if problem.status != 404:
                raise
            return {"balance": None, "runway": "", "credits": []}
        credits = [(reason_zh if lang != "en" and reason_zh else (c.reason if lang == "en" else t("credit_word")),
                    money(c.remaining)) for c, reason_zh in self.service.credits(key, tenant)]
        owes = self.service.account(key, tenant)  # issue 38: what the invoices still ask, the credit held
        account = {"outstanding": money(owes.outstanding), "credit": money(owes.unapplied) if owes.unapplied else "",
                   "past_due": t("past_due_part", amount=money(owes.past_due)) if owes.past_due > 0 else ""}
        if not figures.prepaid:  # issue 36: not "Prepaid balance −¥12.49" but what it is charged, less payments
            note = (t("owed_note_credit", outstanding=money(owes.outstanding), unapplied=money(owes.unapplied),
                      estimated=money(figures.estimated)) if owes.unapplied
                    else t("owed_note", outstanding=money(owes.outstanding), estimated=money(figures.estimated)))
            return {"balance": money(figures.owed), "balance_label": t("owed"), "prepaid": False,
                    "balance_note": note, "runway": t("runway_postpaid"), "credits": credits, **account}
        runway = (t("runway_hours", hours=number(figures.runway_hours, 2)) if figures.runway_hours is not None
                  else t("no_runway"))
        return {"balance": money(figures.balance), "balance_label": t("balance"), "prepaid": True, "balance_note": "",
                "runway": runway, "credits": credits, **account}

    def _render(self, request: Request, template: str, lang: str, context: dict[str, Any], *,
                status: int = 200) -> Response:
        page = self.env.get_template(template).render(t=Words(lang), lang=lang, switch=_switch(request, lang),
                                                       brand=self.service.brand(lang),
                                                       **context)
        response = HTMLResponse(page, status_code=status)
        if request.query_params.get("lang") in LANGS:
            _set_cookie(response, request, LANG_COOKIE, lang, max_age=365 * 86400, samesite="lax")
        return self._headers(response, request)

    def _headers(self, response: Response, request: Request, *, cache: bool = True) -> Response:
        response.headers.update(SECURITY_HEADERS)
        if cache:
            response.headers["Cache-Control"] = "no-store"
        if _https(request):
            response.headers["Strict-Transport-Security"] = "max-age=31536000"
        return response

    def _from_this_page(self, request: Request) -> bool:
        return same_origin(request.headers, request.url.scheme, request.url.netloc)

    def _csrf_ok(self, request: Request, session: Session, csrf: str) -> bool:
        return self._from_this_page(request) and tokens_match(session.csrf, csrf)

    def _lang(self, request: Request) -> str:
        return pick_lang(request.query_params.get("lang"), request.cookies.get(LANG_COOKIE),
                         request.headers.get("accept-language"))


# -- small pure helpers ---------------------------------------------------------------------

def _client(request: Request) -> str:
    return request.client.host if request.client else ""


def _https(request: Request) -> bool:
    """Whether the browser is on https: we serve it, or (behind a TLS proxy, which we see as
    http) its form post says so in Origin. Cookies are then Secure."""
    return request.url.scheme == "https" or request.headers.get("origin", "").lower() == f"https://{request.url.netloc}"


def _set_cookie(response: Response, request: Request, name: str, value: str, *, max_age: int | None,
                samesite: str = "strict") -> None:
    response.set_cookie(name, value, max_age=max_age, path="/", secure=_https(request), httponly=True,
                        samesite=samesite)


def _switch(request: Request, lang: str) -> list[tuple[str, str, str, bool]]:
    """The language switcher's links: this page (its period and statement range kept) in each language."""
    params = request.query_params
    period = params.get("period", "")
    keep = {"period": period} if PERIOD.fullmatch(period) else {}
    keep |= {name: params[name] for name in ("from", "to") if DAY.fullmatch(params.get(name, ""))}
    return [(code, LANG_NAMES[code], "/?" + urlencode({**keep, "lang": code}), code == lang) for code in LANGS]


def _recent_periods(current: str, count: int) -> list[str]:
    """`current` and the `count` - 1 months before it, newest first."""
    year, month = int(current[:4]), int(current[5:7])
    out = []
    for _ in range(count):
        out.append(f"{year:04d}-{month:02d}")
        year, month = (year - 1, 12) if month == 1 else (year, month - 1)
    return out
