"""Runs the whole benchmark suite, each scenario in its own process, and reports against the goals.

    python -m benchmarks                    # every scenario (several minutes), prints Markdown
    python -m benchmarks --quick            # a smoke run (about a minute)
    python -m benchmarks --record --chart   # also append to benchmarks/RESULTS.md, write docs/performance.png
    python -m benchmarks --only sync,async  # some scenarios only
    python -m benchmarks --from-json run.json --chart   # redo the report and chart of a saved run

Run it from the repository root, on an otherwise idle machine, with permits installed (pip install .)
and the peers (pip install -r benchmarks/requirements.txt).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ._chart import write_chart
from ._goals import all_goals
from ._report import ROOT, header, record, report
from ._scenarios import SCENARIOS, run_all

RESULTS_MD = ROOT / "benchmarks" / "RESULTS.md"
CHART = ROOT / "docs" / "performance.png"


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    keys = [s.key for s in SCENARIOS]
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs, fewer keys and waiters (a smoke test)")
    parser.add_argument("--only", type=lambda s: s.split(","), default=keys, help=f"comma-separated: {','.join(keys)}")
    parser.add_argument("--record", action="store_true", help=f"append the report to {RESULTS_MD.relative_to(ROOT)}")
    parser.add_argument("--chart", action="store_true", help=f"write {CHART.relative_to(ROOT)}")
    parser.add_argument("--chart-path", type=Path, default=CHART, help="where --chart writes")
    parser.add_argument("--json", type=Path, help="also save everything measured (for --from-json)")
    parser.add_argument("--from-json", type=Path, help="report on a saved run instead of measuring")
    parser.add_argument("-v", "--verbose", action="store_true", help="each scenario's progress and own tables")
    args = parser.parse_args(args_list)
    unknown = set(args.only) - set(keys)
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")

    if args.from_json:
        saved = json.loads(args.from_json.read_text(encoding="utf-8"))
        meta: dict[str, Any] = saved["meta"]
        collected: dict[str, dict[str, Any]] = saved["collected"]
    else:
        meta = header(args_list)
        collected = run_all(args.only, args.quick, args.verbose)
        meta["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        if args.verbose:
            for key, data in collected.items():
                print(f"\n### {key}\n\n{data.get('text', '')}")
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "collected": collected}, indent=1) + "\n", encoding="utf-8")

    text = report(meta, all_goals(collected), collected)
    print(text)
    if args.record:
        record(text, meta, RESULTS_MD)
        print(f"appended to {RESULTS_MD}", file=sys.stderr)
    if args.chart:
        write_chart(collected, args.chart_path, f"permits benchmarks, {meta['date']}, commit {meta['commit']}")
        print(f"wrote {args.chart_path}", file=sys.stderr)
    failed = [key for key, data in collected.items() if str(data.get("status", "ok")).startswith("failed")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
