"""Who is on an invoice: the seller from billing.toml `[seller]`, and the checks of tax ids. Pure.

    Seller                   the operator as its documents name it (brand, legal name, address, tax id, bank)
    Seller.text(field, lang) a field in `lang`: the `_zh` variant for "zh-CN" when the rules give one
    uscc_problem(code)       why `code` is not a valid 统一社会信用代码 (unified social credit code), or None

A unified social credit code (GB 32100-2015) is 18 characters from 0-9 and A-Y without
I, O, S, V and Z; the last is a check character over the first 17, weights 3^i mod 31:

    check = (31 − Σ value(cᵢ) × 3^i mod 31) mod 31        (i = 0 … 16)

so a mistyped code is caught before it is printed on a document a tax office reads.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["Seller", "USCC_CHARS", "looks_like_uscc", "uscc_problem"]

USCC_CHARS = "0123456789ABCDEFGHJKLMNPQRTUWXY"
_WEIGHTS = tuple(pow(3, i, 31) for i in range(17))


@dataclass(frozen=True, slots=True)
class Seller:
    """The operator issuing invoices (billing.toml `[seller]`); `_zh` fields are None where not given."""

    brand: str
    legal_name: str
    address: str
    tax_id: str
    contact: str
    bank: str | None = None
    bank_account: str | None = None
    brand_zh: str | None = None
    legal_name_zh: str | None = None
    address_zh: str | None = None
    bank_zh: str | None = None

    def text(self, field: str, lang: str) -> str | None:
        """`field` as a document in `lang` prints it: `field_zh` for zh-CN when given, else `field`."""
        if lang == "zh-CN":
            zh = getattr(self, f"{field}_zh", None)
            if zh:
                return zh
        return getattr(self, field)

    @classmethod
    def of(cls, entry: object) -> "Seller":
        """From a validated `billing_rules.files.SellerEntry`."""
        return cls(**{f.name: getattr(entry, f.name) for f in fields(cls)})


def looks_like_uscc(code: str) -> bool:
    """True for 18 characters of 0-9 and A-Z: a code that is meant to be a 统一社会信用代码."""
    return len(code) == 18 and code.isascii() and code.isalnum() and code == code.upper()


def uscc_problem(code: str) -> str | None:
    """None when `code` is a valid unified social credit code; otherwise what is wrong with it, one line."""
    if len(code) != 18:
        return f"a unified social credit code has 18 characters, {code!r} has {len(code)}"
    bad = sorted({c for c in code if c not in USCC_CHARS})
    if bad:
        return f"{code!r} has characters a unified social credit code never uses: {''.join(bad)} (I, O, S, V, Z are not used)"
    total = sum(USCC_CHARS.index(c) * w for c, w in zip(code[:17], _WEIGHTS))
    expected = USCC_CHARS[(31 - total % 31) % 31]
    if code[17] != expected:
        return f"{code!r} fails its check character: the 18th should be {expected!r} (a typo?)"
    return None
