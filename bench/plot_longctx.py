"""Draw the Long context lab's cross-run pictures from its benchmarks' JSON, as PNG (plotly.js in headless Chromium,
as `bench/bench_scaling.py --png` does; no model is loaded):

    python bench/plot_longctx.py --needle assets/longctx/needle.json --png assets/longctx/needle-compute.png
    python bench/plot_longctx.py --speed /tmp/lc_bench.json --png assets/longctx/speed.png

`--needle FILE`: the object `bench/bench_needle.py --json` prints (accuracy against GFLOPs per question for each
method, one line through its windows: `visualizers.longctx_bench.needle_compute_figure`). `--speed FILE`: the object
`bench/bench_long_context.py --json` prints (decode tokens/s of plain greedy and each drafter, and each drafter's
acceptance, against the prompt's length: `context_speed_figure`; the per-drafter format `rows[i].drafters` and the
older one with RAPID's figures at the top level both read). Without `--png` the figure's JSON is printed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from visualizers.longctx_bench import context_speed_figure, needle_compute_figure


def draw(fig, png: Path) -> None:
    """`fig` as a PNG of its own width and height."""
    from playwright.sync_api import sync_playwright

    from visualizers import figure_to_html

    width, height = int(fig.layout.width or 900), int(fig.layout.height or 500)
    page_file = Path(tempfile.mkdtemp()) / "figure.html"
    page_file.write_text(figure_to_html(fig))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium")
        page = browser.new_page(viewport={"width": width + 20, "height": height + 20})
        page.goto(page_file.as_uri())
        page.wait_for_selector(".main-svg")
        page.locator(".plotly").first.screenshot(path=str(png))
        browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--needle", type=Path, metavar="FILE", help="bench_needle.py --json's output")
    source.add_argument("--speed", type=Path, metavar="FILE", help="bench_long_context.py --json's output")
    parser.add_argument("--png", type=Path, metavar="FILE", help="write the picture here")
    args = parser.parse_args(argv)
    path = args.needle or args.speed
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        parser.error(f"{path}: {err}")
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        parser.error(f"{path}: expected the benchmark's --json object (with `rows`)")
    fig = needle_compute_figure(data) if args.needle else context_speed_figure(data)
    if args.png:
        draw(fig, args.png)
        print(f"wrote {args.png}")
    else:
        print(fig.to_json())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
