"""WebComparator: accessibility trees keyed by role, name and path, never by bid."""

from __future__ import annotations

import pytest

from fidelity.compare import WebComparator, get_comparator
from fidelity.compare.base import CompareContext
from fidelity.compare.web import parse_tree, strip_bids
from fidelity.trajectory import Observation, Step, TextAction

PAGE = """\
[1] RootWebArea 'Shop - Cart', focused, url='http://localhost:8123/cart'
\t[{a}] navigation ''
\t\t[{b}] link 'Home', url='http://localhost:8123/'
\t\t[{c}] link 'Orders', url='http://localhost:8123/orders'
\t[{d}] main ''
\t\t[{e}] heading 'Your cart (2 items)'
\t\t[{f}] list ''
\t\t\t[{g}] listitem ''
\t\t\t\tStaticText 'Blue mug - $12.00'
\t\t\t\t[{h}] button 'Remove', clickable
\t\t\t[{i}] listitem ''
\t\t\t\tStaticText 'Tea towel - $6.50'
\t\t\t\t[{j}] button 'Remove', clickable
\t\t[{k}] checkbox 'Gift wrap', checked='false'
\t\t[{l}] button 'Checkout', clickable
\t\tStaticText 'Updated {when}'
"""


def page(offset: int, when: str = "2026-11-20T10:00:00Z", **edits: str) -> str:
    """The cart page with bids counted from *offset* (another way to reach it)."""
    text = PAGE.format(**{k: str(offset + i) for i, k in enumerate("abcdefghijkl")}, when=when)
    for old, new in edits.items():
        text = text.replace(old.replace("_", " "), new)
    return text


def context(history: list[Step] | None = None) -> CompareContext:
    return CompareContext(action=TextAction(text="click('57')"), history=history or [])


def compare(real: str, sim: str, ctx: CompareContext | None = None):  # type: ignore[no-untyped-def]
    return WebComparator().compare(Observation(text=real), Observation(text=sim), ctx or context())


def test_same_page_with_other_bids_and_time_does_not_drift() -> None:
    result = compare(page(10), page(57, when="2026-11-21T08:13:44Z"))
    assert (result.score, result.drift, result.reasons) == (1.0, False, [])
    assert result.hallucinations == result.omissions == []
    assert result.normalizations["web_bid"] == 2 * 12 + 2
    assert result.normalizations["timestamp"] == 2
    assert result.metrics["node_f1"] == result.metrics["tree_sim"] == 1.0


def test_invented_button_is_a_hallucinated_ui_label() -> None:
    sim = page(10).replace(
        "\t\t[21] button 'Checkout', clickable",
        "\t\t[21] button 'Checkout', clickable\n\t\t[22] button 'Apply coupon', clickable",
    )
    result = compare(page(10), sim)
    assert result.drift
    assert result.hallucinations == ["ui:button:Apply coupon"]
    assert "hallucinated ui:button:Apply coupon" in result.reasons
    assert result.metrics["node_recall"] == 1.0 > result.metrics["node_precision"]


def test_dropped_item_is_an_omission() -> None:
    sim = page(10).replace("\t\t\t\tStaticText 'Tea towel - $6.50'\n", "")
    result = compare(page(10), sim)
    assert result.drift
    assert result.omissions == ["ui:StaticText:Tea towel - $6.50"]


def test_invented_url_is_named() -> None:
    sim = page(10).replace("localhost:8123/orders", "localhost:8123/account/orders")
    result = compare(page(10), sim)
    assert result.drift
    assert "url:http://localhost:<PORT>/account/orders" in result.hallucinations
    assert any(r.startswith("prop link:Orders:") for r in result.reasons)


def test_flipped_checkbox_is_a_property_mismatch() -> None:
    result = compare(page(10), page(10).replace("checked='false'", "checked='true'"))
    assert result.drift
    assert result.hallucinations == result.omissions == []
    assert result.metrics["prop_agreement"] < 1.0
    assert "prop checkbox:Gift wrap: checked='false' != checked='true'" in result.reasons


def test_node_moved_under_another_parent_changes_its_key() -> None:
    real = "[1] main ''\n\t[2] list ''\n\t\t[3] link 'Docs'\n\t[4] link 'Blog'\n"
    sim = "[1] main ''\n\t[2] list ''\n\t\t[3] link 'Docs'\n\t\t[4] link 'Blog'\n"
    result = compare(real, sim)
    assert result.metrics["node_f1"] == 0.75
    assert result.metrics["tree_sim"] < 1.0
    assert result.drift and result.hallucinations == []


def test_label_seen_in_history_is_stale_not_hallucinated() -> None:
    sim = page(10).replace("'Checkout'", "'Pay now'")
    earlier = Step(
        action=TextAction(text="goto('/pay')"), observation=Observation(text="button 'Pay now'")
    )
    result = compare(page(10), sim, context([earlier]))
    assert result.stale == ["ui:button:Pay now"]
    assert result.hallucinations == []
    assert result.omissions == ["ui:button:Checkout"]


def test_parse_tree_keys_by_path_not_bid() -> None:
    text, removed = strip_bids("[a1] main ''\n  [a2] button 'OK', clickable\n")
    nodes = parse_tree(text)
    assert removed == 2
    assert [n.key for n in nodes] == ["/main:", "main:/button:OK"]
    assert nodes[1].props == "clickable" and nodes[1].depth == 1


def test_plain_text_falls_back_to_text_comparison() -> None:
    result = compare("Page failed to load: net::ERR_CONNECTION_REFUSED", "Page loaded.")
    assert result.drift
    assert "node_f1" not in result.metrics


@pytest.mark.parametrize("threshold", [0.5, 0.99])
def test_threshold_from_config(threshold: float) -> None:
    from fidelity.compare import CompareConfig

    assert (
        get_comparator("web", CompareConfig(thresholds={"web": threshold})).threshold == threshold
    )


def test_temp_folders_and_masked_secrets_of_two_real_runs_do_not_drift() -> None:
    # sqlite-web shows its database path (a mkdtemp folder); Django masks a password salt
    real = (
        "[1] RootWebArea 'Site'\n\t[70] cell '/tmp/fidelity-browser-edwdk_xx/inventory.db'\n"
        "\t[71] StaticText 'UY********************'\n\t[72] StaticText '60d9c1**************'"
    )
    sim = (
        "[1] RootWebArea 'Site'\n\t[70] cell '/tmp/fidelity-browser-4gm_ywzu/inventory.db'\n"
        "\t[71] StaticText '0D********************'\n\t[72] StaticText '5c6815**************'"
    )
    result = compare(real, sim)
    assert (result.drift, result.hallucinations, result.omissions) == (False, [], [])
    assert result.normalizations["web_temp_dir"] == 2
    assert result.normalizations["web_masked_secret"] == 4


def test_a_changed_file_name_under_a_temp_folder_still_drifts() -> None:
    real = "[1] RootWebArea 'Site'\n\t[70] cell '/tmp/fidelity-browser-edwdk_xx/inventory.db'"
    sim = "[1] RootWebArea 'Site'\n\t[70] cell '/tmp/fidelity-browser-edwdk_xx/warehouse.db'"
    result = compare(real, sim)
    assert result.drift
    assert result.hallucinations == ["ui:cell:/tmp/fidelity-browser-<TMP>/warehouse.db"]


def test_action_error_and_tabs_in_the_header_are_compared() -> None:
    body = "[1] RootWebArea 'Books', url='http://localhost:8000/books'\n\t[2] button 'Go'"
    error = "# error: 'click(): no element with bid \\'99\\''\n"
    real = f"# url: 'http://localhost:8000/books'\n# tab 0 (active): 'Books'\n{error}{body}"
    quiet = real.replace(error, "")
    result = compare(real, quiet)
    assert result.drift
    assert result.omissions == ["ui:error:click(): no element with bid \\'99\\'"]
    two_tabs = real.replace(
        "# tab 0 (active): 'Books'", "# tab 0: 'Books'\n# tab 1 (active): 'Cart'"
    )
    result = compare(real, two_tabs)
    assert result.drift and "ui:tab:Cart" in result.hallucinations
    assert compare(real, real.replace("[2]", "[7]")).drift is False


def test_nodes_sharing_a_key_are_matched_in_page_order() -> None:
    rows = "".join(f"\t[{i}] checkbox 'Select row', checked=false\n" for i in range(2, 6))
    real = f"[1] RootWebArea 'Rows'\n{rows}"
    flipped = real.replace(
        "[4] checkbox 'Select row', checked=false", "[4] checkbox 'Select row', checked=true"
    )
    result = compare(real, flipped)
    assert result.drift
    assert result.metrics["prop_mismatches"] == 1.0
    assert result.metrics["prop_agreement"] == 0.8  # 1 of 5 matched nodes (root included)
