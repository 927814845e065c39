from __future__ import annotations

import pytest

from signoff.tools.demo import demo_tools
from signoff.tools.demo.lookup_orders import orders
from signoff.tools.demo.search_handbook import handbook


@pytest.fixture
def tools(tmp_path):
    return {tool.name: tool for tool in demo_tools(tmp_path / "outbox")}


def call(tool, **args):
    """Validate like the agent does, then run with a key."""
    return tool.fn(tool.validate(args), "run-test:1")


def test_read_tools_are_read_only_with_short_timeouts(tools):
    for name in ("search_handbook", "lookup_orders"):
        assert not tools[name].side_effect
        assert tools[name].timeout_s == 5.0
        assert tools[name].description


def test_the_built_in_data_has_the_promised_size():
    assert len(handbook()) == 8
    assert len(orders()) == 12
    assert len({o["order_id"] for o in orders()}) == 12


@pytest.mark.parametrize(
    ("query", "best"),
    [
        ("refund policy", "refund-policy"),
        ("How do I restart a service?", "restart-procedure"),
        ("email etiquette", "email-etiquette"),
        ("when to escalate to the on-call lead", "escalation"),
        ("parcel arrived broken", "damaged-items"),
    ],
)
def test_search_handbook_ranks_the_right_entry_first(tools, query, best):
    result = call(tools["search_handbook"], query=query)
    assert result["query"] == query
    assert result["results"][0]["id"] == best
    assert set(result["results"][0]) == {"id", "title", "text"}


def test_search_handbook_returns_nothing_for_unrelated_words_and_respects_limit(tools):
    assert call(tools["search_handbook"], query="quantum chromodynamics")["results"] == []
    assert len(call(tools["search_handbook"], query="refund order email lead", limit=2)["results"]) == 2


@pytest.mark.parametrize("query", ["", "   ", "\n"])
def test_an_empty_query_is_a_value_error(tools, query):
    with pytest.raises(ValueError, match="empty query"):
        tools["search_handbook"].validate({"query": query})
    with pytest.raises(ValueError, match="empty query"):
        tools["search_handbook"].fn({"query": query}, "run-test:1")


def test_lookup_orders_by_email_is_case_insensitive(tools):
    found = call(tools["lookup_orders"], customer_email=" ADA@Example.com ")["orders"]
    assert [o["order_id"] for o in found] == ["A-1001", "A-1004"]
    assert found[0]["refundable_usd"] == "42.00"
    assert {"total_usd", "status", "items", "customer_name"} <= set(found[0])


def test_lookup_orders_by_id_shows_what_is_still_refundable(tools):
    [order] = call(tools["lookup_orders"], order_id="a-1009")["orders"]
    assert (order["total_usd"], order["refunded_usd"], order["refundable_usd"]) == ("75.00", "25.00", "50.00")


def test_lookup_orders_with_both_filters_needs_both_to_match(tools):
    assert call(tools["lookup_orders"], customer_email="ada@example.com", order_id="A-1004")["orders"]
    assert call(tools["lookup_orders"], customer_email="alan@example.com", order_id="A-1004")["orders"] == []


def test_lookup_orders_finds_nothing_for_unknown_customers(tools):
    assert call(tools["lookup_orders"], customer_email="nobody@example.com") == {"orders": []}


@pytest.mark.parametrize("args", [{}, {"customer_email": "  "}, {"order_id": None}, {"email": "ada@example.com"}])
def test_lookup_orders_needs_an_email_or_an_order_id(tools, args):
    with pytest.raises(ValueError, match="invalid arguments"):
        tools["lookup_orders"].validate(args)
