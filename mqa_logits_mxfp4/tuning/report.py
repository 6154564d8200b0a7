"""The bench plot: roofline fraction per shape, one bar per backend (its best candidate), the
torch path included. Drawn from the bench CSV, so a CSV made where matplotlib is missing can be
drawn elsewhere: `python3 -m mqa_logits_mxfp4.tuning.report BENCH.csv BENCH.png`.
"""

from __future__ import annotations

import argparse
import csv
import sys

NO_MATPLOTLIB = ("matplotlib is not installed: no PNG written (draw it where matplotlib is: "
                 "python3 -m mqa_logits_mxfp4.tuning.report {csv} {png})")


def best_fractions(rows: list[dict]) -> tuple[list[str], dict[str, dict[str, float]]]:
    """(shapes in CSV order, {backend: {shape: best roofline fraction}}) over rows with status ok;
    shape names carry their suite where the rows come from several."""
    shapes, best = [], {}
    several = len({r.get("suite") for r in rows}) > 1
    for r in rows:
        if r.get("status") != "ok" or not r.get("fraction"):
            continue
        shape = f"{r['suite']}: {r['shape']}" if several else r["shape"]
        if shape not in shapes:
            shapes.append(shape)
        per = best.setdefault(r["backend"], {})
        per[shape] = max(per.get(shape, 0.0), float(r["fraction"]))
    return shapes, best


def _title(rows: list[dict]) -> str:
    r = rows[0] if rows else {}
    parts = [r.get("device_name", ""), f"copy {r.get('copy_GBps', '?')} GB/s",
             f"FP8 {r.get('fp8_TFLOPs') or '-'} / BF16 {r.get('bf16_TFLOPs', '?')} TFLOP/s (measured in the run)",
             r.get("date", "")]
    return "mqa_logits_mxfp4 roofline fraction (floor / measured)\n" + ", ".join(p for p in parts if p)


def plot(rows: list[dict], png, csv_name: str = "BENCH.csv") -> str:
    """Write the PNG; returns a line saying what was written (or why nothing was)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return NO_MATPLOTLIB.format(csv=csv_name, png=png)
    shapes, best = best_fractions(rows)
    if not shapes:
        return "no timed rows: no PNG written"
    backends = sorted(best, key=lambda b: (b == "torch", b))
    height = 0.8 / len(backends)
    fig, ax = plt.subplots(figsize=(11, 1.5 + 0.22 * len(shapes) * max(1, len(backends) / 1.5)))
    for i, backend in enumerate(backends):
        ys = [n + i * height for n in range(len(shapes))]
        xs = [best[backend].get(s, 0.0) for s in shapes]
        ax.barh(ys, xs, height=height, label=backend)
    ax.set_yticks([n + height * (len(backends) - 1) / 2 for n in range(len(shapes))])
    ax.set_yticklabels(shapes, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("fraction of the roofline floor (log scale; 1 = at the floor)")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.grid(axis="x", which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(_title(rows), fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return f"wrote {png} ({len(shapes)} shapes x {len(backends)} backends)"


def read_csv(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m mqa_logits_mxfp4.tuning.report",
                                 description="Draw the bench plot from a bench CSV.")
    ap.add_argument("csv")
    ap.add_argument("png")
    args = ap.parse_args(argv)
    message = plot(read_csv(args.csv), args.png, args.csv)
    print(message)
    return 0 if message.startswith("wrote") else 1


if __name__ == "__main__":
    sys.exit(main())
