"""Plots for `kernelrl eval` (matplotlib only; the numbers come from report.json).

  eval_plots.py REPORT_JSON OUT_DIR

Writes speedups.png (speed-up distribution per level, vs eager and vs
torch.compile, log scale) and outcomes.png (outcome breakdown per level).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(report_path, out):
    with open(report_path) as f:
        report = json.load(f)
    levels = [l for l in report["levels"] if l["level"] != "overall"] or report["levels"]

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, key, title in [(axes[0], "speedups_vs_eager", "vs eager"), (axes[1], "speedups_vs_compile", "vs torch.compile")]:
        data = [l[key] or [float("nan")] for l in levels]
        ax.boxplot(data, showfliers=False)
        ax.set_xticks(range(1, len(levels) + 1), [l["level"] for l in levels])
        for i, d in enumerate(data):
            ax.scatter([i + 1 + 0.08 * ((j % 5) - 2) for j in range(len(d))], d, s=14, alpha=0.7)
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_title("speed-up " + title + " (correct solutions)")
    axes[0].set_ylabel("speed-up (x)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "speedups.png"), dpi=120)

    outcomes = sorted({k for l in levels for k in l["outcomes"]})
    fig, ax = plt.subplots(figsize=(7, 4))
    bottom = [0] * len(levels)
    for o in outcomes:
        vals = [l["outcomes"].get(o, 0) for l in levels]
        ax.bar([l["level"] for l in levels], vals, bottom=bottom, label=o)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("tasks")
    ax.set_title("outcome of the best solution per task")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "outcomes.png"), dpi=120)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
