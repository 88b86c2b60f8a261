"""The Data Docs index's note for readers without network."""

from __future__ import annotations

from pathlib import Path

import pytest

from hulk.validation.docs_offline import NOTE_ID, add_offline_note

INDEX = "<html><head></head><body class='x'>\n<div>the index</div></body></html>"


def _page(docs: Path, suite: str, batch: str, run: str) -> None:
    path = docs / "validations" / Path(*suite.split(".")) / batch / run / f"{suite}.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("<html></html>")


def test_the_note_links_each_batchs_newest_page_and_hides_online(tmp_path: Path) -> None:
    index = tmp_path / "index.html"
    index.write_text(INDEX)
    _page(tmp_path, "hulk.logs", "day=2026-11-19", "20261123T020000Z")
    _page(tmp_path, "hulk.logs", "day=2026-11-19", "20261124T020000Z")
    _page(tmp_path, "hulk.logs", "day=2026-11-20", "20261124T020000Z")
    _page(tmp_path, "hulk.logs", "day=2026-08-22", "20261123T020000Z")  # out of the window now
    _page(tmp_path, "hulk.inventory", "machines.csv", "20261124T020500Z")

    add_offline_note(index)
    add_offline_note(index)  # again: replaced, not repeated
    page = index.read_text()
    assert page.count(f'id="{NOTE_ID}"') == 1
    assert page.index(f'id="{NOTE_ID}"') > page.index("<body class='x'>")
    assert page.index(f'id="{NOTE_ID}"') < page.index("the index")
    assert 'class="d-none"' in page  # Bootstrap hides it once its stylesheet loads
    assert "Validated on 2026-11-24 (UTC)" in page
    assert "validations/hulk/logs/day=2026-11-19/20261124T020000Z/hulk.logs.html" in page
    assert "20261123T020000Z/hulk.logs.html" not in page  # older pages: not linked
    assert "day=2026-08-22" not in page
    assert page.index("hulk.inventory:") < page.index("hulk.logs:")


def test_a_page_without_body_is_refused(tmp_path: Path) -> None:
    index = tmp_path / "index.html"
    index.write_text("<html>no body</html>")
    with pytest.raises(ValueError, match="no <body>"):
        add_offline_note(index)
