"""Plotly figures stacked into one PNG, drawn by plotly.js in headless Chromium (no kaleido needed): the
pictures the docs show of an accordion, from the benchmark that measured them (bench_infalign, bench_judge)."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path


def figures_png(figures: list, png: Path, width: int = 900) -> None:
    """Write `figures` (plotly), one below the other at `width` pixels, to `png`."""
    from playwright.sync_api import sync_playwright

    body = []
    for i, fig in enumerate(figures):
        fig.update_layout(width=width)
        body.append(fig.to_html(full_html=False, include_plotlyjs=i == 0))
    page_file = Path(tempfile.mkdtemp()) / "figures.html"
    page_file.write_text("<html><head><meta charset='utf-8'></head><body style='margin:0;background:white'>"
                         + "".join(body) + "</body></html>", encoding="utf-8")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium")
        page = browser.new_page(viewport={"width": width + 20, "height": 400})
        page.goto(page_file.as_uri())
        page.wait_for_selector(".main-svg")
        page.screenshot(path=str(png), full_page=True)
        browser.close()
    print(f"wrote {png}", file=sys.stderr)
