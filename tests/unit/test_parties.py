"""The seller of billing.toml `[seller]` and the check of a 统一社会信用代码 (billing_rules/parties.py)."""

from __future__ import annotations

import pytest

from billing_rules import DEFAULT_RULES_DIR, RuleSetInvalid, load_rules
from billing_rules.parties import uscc_problem
from tests.unit.test_rules_loader import planted


@pytest.mark.parametrize("code", [
    "91350100M000100Y43",  # the example code printed in guides to GB 32100-2015
])
def test_a_published_code_passes(code):
    # Check by hand: values 9,1,3,5,0,1,0,0,M=21,0,0,0,1,0,0,Y=30,4 × weights 1,3,9,27,19,26,16,17,20,29,25,13,8,24,10,30,28
    # = 9+3+27+135+0+26+0+0+420+0+0+0+8+0+0+900+112 = 1640; 1640 mod 31 = 28; 31 − 28 = 3 → '3' ✓
    assert uscc_problem(code) is None


@pytest.mark.parametrize("code, fragment", [
    ("91350100M000100Y44", "the 18th should be '3'"),  # one typo in the check character
    ("91350100M000100Y4", "18 characters"),
    ("91350100O000100Y43", "never uses: O"),
])
def test_a_mistyped_code_is_named(code, fragment):
    assert fragment in uscc_problem(code)


def test_the_shipped_seller_is_complete_in_both_languages():
    seller = load_rules(DEFAULT_RULES_DIR).seller
    assert seller is not None and uscc_problem(seller.tax_id) is None
    for field in ("brand", "legal_name", "address", "bank"):
        assert seller.text(field, "en") and seller.text(field, "zh-CN") != seller.text(field, "en")
    assert seller.text("contact", "zh-CN") == seller.contact  # no _zh variant: the one text


def test_a_seller_tax_id_with_a_wrong_check_character_refuses_the_rule_set(tmp_path):
    rules = planted(tmp_path, "billing.toml", 'tax_id = "91520900MA6GB0001M"', 'tax_id = "91520900MA6GB0001N"')
    with pytest.raises(RuleSetInvalid, match=r"billing.toml: seller.tax_id: .*the 18th should be 'M'"):
        load_rules(rules)


def test_an_unknown_seller_field_refuses_the_rule_set(tmp_path):
    rules = planted(tmp_path, "billing.toml", "[seller]\n", "[seller]\nvat_no = \"x\"\n")
    with pytest.raises(RuleSetInvalid, match="seller"):
        load_rules(rules)


def test_payment_terms_are_a_whole_number_of_days(tmp_path):
    rules = planted(tmp_path, "billing.toml", "payment_terms_days = 15", "payment_terms_days = 1.5")
    with pytest.raises(RuleSetInvalid, match="payment_terms_days"):
        load_rules(rules)
