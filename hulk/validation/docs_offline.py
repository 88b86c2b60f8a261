"""A note on the Data Docs index for readers without network.

Great Expectations' pages load Bootstrap, jQuery and the index table's scripts from the web:
offline the index shows its header and no result at all. `add_offline_note` puts a note at the
top of the index that says so and links the newest run's result pages (they read in full
offline). The note carries Bootstrap's ``d-none`` class, so it shows only where Bootstrap's
stylesheet did not load: online readers see the usual index.
"""

from __future__ import annotations

import html
import re
from collections import defaultdict
from pathlib import Path

from hulk import fileio

NOTE_ID = "hulk-offline-note"
_NOTE = re.compile(rf'<div id="{NOTE_ID}".*?</div><!-- /{NOTE_ID} -->\n?', re.DOTALL)
_STYLE = (
    "margin:8px;padding:8px 12px;border:1px solid #c9a227;background:#fff8dc;font:14px sans-serif"
)


def add_offline_note(index: Path) -> None:
    """Write the offline note into the Data Docs `index` (replacing an earlier one)."""
    page = _NOTE.sub("", index.read_text(encoding="utf-8"))
    body = re.search(r"<body[^>]*>", page)
    if body is None:
        raise ValueError(f"{index}: no <body> tag, not a Data Docs index")
    note = _note(index.parent)
    fileio.write_text(index, page[: body.end()] + "\n" + note + page[body.end() :])


def _note(docs: Path) -> str:
    """The note's HTML: each batch's newest result page, for the batches validated on the day
    of the newest validation, by suite (run folders are named by their UTC run time)."""
    newest: dict[tuple[str, str], tuple[str, str]] = {}  # (suite, batch) -> (run, page)
    for path in sorted((docs / "validations").rglob("*.html")):
        # validations/<suite parts>/<batch>/<run time>/<page>.html
        parts = path.relative_to(docs / "validations").parts
        if len(parts) < 4:
            continue
        key, run = (".".join(parts[:-3]), parts[-3]), parts[-2]
        if key not in newest or run > newest[key][0]:
            newest[key] = (run, path.relative_to(docs).as_posix())
    lines = [
        f'<div id="{NOTE_ID}" class="d-none" style="{_STYLE}">',
        "<p><b>Offline view.</b> These pages load their styles and scripts from the web; "
        "without network they show unstyled and the table of results below stays empty. "
        "The result pages read in full: the newest are linked here.</p>",
    ]
    if newest:
        day = max(run for run, _ in newest.values())[:8]  # YYYYMMDD
        by_suite: dict[str, list[str]] = defaultdict(list)
        for (suite, batch), (run, page) in sorted(newest.items()):
            if run.startswith(day):
                link = f'<a href="{html.escape(page)}">{html.escape(batch)}</a>'
                by_suite[suite].append(link)
        lines.append(f"<p>Validated on {day[:4]}-{day[4:6]}-{day[6:]} (UTC):</p><ul>")
        lines += [
            f"<li>{html.escape(s)}: {' · '.join(links)}</li>" for s, links in by_suite.items()
        ]
        lines.append("</ul><p>Earlier results are under validations/.</p>")
    else:
        lines.append("<p>No validation result yet.</p>")
    lines.append(f"</div><!-- /{NOTE_ID} -->")
    return "\n".join(lines) + "\n"
