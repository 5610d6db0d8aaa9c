"""The query and path parameters of /v1, declared once: what FastAPI checks and what the
OpenAPI documents say are the same thing (issue 36: a fuzzer must find nothing the schema
does not say).

    Period, UsageFormat, DocumentFormat, Granularity, Lang, Tenant, InvoiceNumber, CreditNoteNumber,
    StatementFrom, StatementTo, StatementFormat
    refusal(error)              FastAPI's validation error → the 400 the API has always given
    tenant_document(spec)       /openapi.json: for tenant keys, no `tenant` parameter
    operator_document(spec)     /openapi-operator.json: for operator keys, `tenant` required

Two documents because the two kinds of key take different parameters: a tenant key reads its
own tenant and may not name one (400), an operator key must name one (400 without). One
document with `tenant` optional would be wrong for both.

What no schema can say, the descriptions do: a well-formed month that has not begun (or lies
outside 0001-01 … 9999-11) has no report (404); hourly rows do not come as a PDF (400); a
statement's `from` after its `to` is 400.
"""

from __future__ import annotations

import copy
from typing import Annotated, Any, Literal

from fastapi import Path, Query

from reports.render.i18n import LANGS
from schemas.ids import ID_PATTERN
from tenant_api.problems import Problem, bad_param
from tenant_api.service import GRANULARITIES, INVOICE_FORMATS, STATEMENT_FORMATS, USAGE_FORMATS

__all__ = ["CreditNoteNumber", "DocumentFormat", "Granularity", "InvoiceNumber", "Lang", "Period", "StatementFormat",
           "StatementFrom", "StatementTo", "Tenant", "UsageFormat", "operator_document", "refusal", "tenant_document"]

# ASCII digits only (a [0-9] class: \d would take "２０２６" too); the service checks the same (service.PERIOD)
PERIOD_PATTERN = r"^[0-9]{4}-(0[1-9]|1[0-2])$"
PERIOD_HINT = "give the billing period as YYYY-MM, e.g. period=2026-03"

Period = Annotated[str, Query(
    pattern=PERIOD_PATTERN, examples=["2026-03"],
    description="The billing period, YYYY-MM (required). A month that has not begun, or outside 0001-01 … "
                "9999-11, has no report: 404.")]
UsageFormat = Annotated[Literal[USAGE_FORMATS], Query(description="The file's format.")]
DocumentFormat = Annotated[Literal[INVOICE_FORMATS], Query(description="The file's format.")]
Granularity = Annotated[Literal[GRANULARITIES], Query(
    description="Rows per day or per hour. Hourly rows come as csv, json or parquet: `granularity=hour` with "
                "`format=pdf` is refused (400).")]
Lang = Annotated[Literal[LANGS], Query(
    description="The language of a PDF's labels (CSV, JSON and Parquet are the same in every language); the "
                "PDF's file name carries it when it is not en.")]
Tenant = Annotated[str | None, Query(
    pattern=ID_PATTERN, max_length=64,
    description="Operator keys only, and then required: the tenant to read. A tenant key reads its own tenant "
                "and may not name one (400).")]
InvoiceNumber = Annotated[str, Path(
    description="GB-YYYY-NNNNNN. Anything else, or another tenant's, is 404 like one that does not exist.",
    json_schema_extra={"pattern": r"^GB-[0-9]{4}-[0-9]{6}$", "examples": ["GB-2026-000001"]})]
CreditNoteNumber = Annotated[str, Path(
    description="CN-YYYY-NNNNNN. Anything else, or another tenant's, is 404 like one that does not exist.",
    json_schema_extra={"pattern": r"^CN-[0-9]{4}-[0-9]{6}$", "examples": ["CN-2026-000001"]})]

# a day; `format: date` makes a fuzzer send days of the calendar (the service refuses 2026-02-30 too).
# Optional with a None default in the route: the document says a plain string (no anyOf with null, so
# `format` stays beside the pattern)
DATE_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
StatementFrom = Annotated[str, Query(
    alias="from", pattern=DATE_PATTERN, json_schema_extra={"format": "date"}, examples=["2026-03-01"],
    description="The statement's first day, YYYY-MM-DD (billing time zone); default: the first day of `to`'s "
                "month. After `to` (or after today when `to` is left out): 400.")]
StatementTo = Annotated[str, Query(
    pattern=DATE_PATTERN, json_schema_extra={"format": "date"}, examples=["2026-03-31"],
    description="The statement's last day, YYYY-MM-DD, included; default: today in the billing time zone.")]
StatementFormat = Annotated[Literal[STATEMENT_FORMATS], Query(description="The statement's format.")]

_PATTERN_WORDS = {"period": "not a month like 2026-03", "from": "not a date like 2026-03-01",
                  "to": "not a date like 2026-03-31",
                  "tenant": "not a tenant id (letters, digits, '.', '_', '-'; at most 64)"}


def refusal(error: dict[str, Any]) -> Problem:
    """The 400 of one of FastAPI's validation errors, in the API's words (`param` names it)."""
    where = [str(part) for part in error.get("loc", ()) if part not in ("query", "path", "header", "body")]
    param = ".".join(where) or "request"
    kind = error.get("type", "")
    if kind == "missing":
        return bad_param(param, f"missing: {PERIOD_HINT}" if param == "period" else "missing")
    if kind == "literal_error":
        shown = "".join(c if c.isprintable() else "?" for c in str(error.get("input", ""))[:40])
        expected = str((error.get("ctx") or {}).get("expected", "")).replace("'", "")
        return bad_param(param, f"{shown!r} is not one of {expected.replace(' or ', ', ')}")
    if kind in ("string_pattern_mismatch", "string_too_long") and param in _PATTERN_WORDS:
        return bad_param(param, _PATTERN_WORDS[param])
    return bad_param(param, str(error.get("msg", "invalid")))


def _tenant_parameters(spec: dict[str, Any], keep: bool) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    for path, operations in out.get("paths", {}).items():
        if not path.startswith("/v1/"):
            continue
        for operation in operations.values():
            params = []
            for param in operation.get("parameters", []):
                if param.get("name") == "tenant" and param.get("in") == "query":
                    if not keep:
                        continue
                    param["required"] = True
                    schema = param.get("schema", {})
                    # `str | None` is written anyOf [string, null]: an operator sends a string
                    strings = [s for s in schema.get("anyOf", []) if s.get("type") == "string"]
                    if strings:
                        param["schema"] = {**strings[0], **{k: v for k, v in schema.items() if k != "anyOf"}}
                params.append(param)
            operation["parameters"] = params
            if not params:
                del operation["parameters"]
    return out


def tenant_document(spec: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI document for tenant keys: `spec` without the `tenant` parameter."""
    out = _tenant_parameters(spec, keep=False)
    out["info"]["description"] += " This document is for tenant keys; operator keys: /openapi-operator.json."
    return out


def operator_document(spec: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI document for operator keys: `spec` with `tenant` required wherever it is taken."""
    out = _tenant_parameters(spec, keep=True)
    out["info"]["title"] += " (operator keys)"
    out["info"]["description"] += " This document is for operator keys: they name the tenant; tenant keys: /openapi.json."
    return out
