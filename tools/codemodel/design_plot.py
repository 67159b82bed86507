"""Draws design_report's per-family design distribution over policy versions.

  design_plot.py DESIGN_REPORT.json OUT.png

One panel per family: for each policy-version bucket, the share of trajectories whose final kernel
has each design (choice digits; "none": no kernel written, "other": not a clean rendering).
"""
import json
import sys


def main():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    report = json.load(open(sys.argv[1]))
    families = report["designs_by_family"]
    fig, axes = plt.subplots(1, max(1, len(families)), figsize=(5 * max(1, len(families)), 4), squeeze=False)
    for ax, (family, rows) in zip(axes[0], sorted(families.items())):
        designs = sorted({d for r in rows for d in r["designs"]})
        labels = [r["versions"] for r in rows]
        bottom = [0.0] * len(rows)
        for d in designs:
            share = []
            for r in rows:
                n = sum(r["designs"].values())
                share.append(r["designs"].get(d, 0) / n if n else 0)
            ax.bar(labels, share, bottom=bottom, label=d)
            bottom = [b + s for b, s in zip(bottom, share)]
        ax.set_title(family)
        ax.set_xlabel("policy versions")
        ax.set_ylabel("share of final kernels")
        ax.tick_params(axis="x", rotation=45)
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=90)


if __name__ == "__main__":
    main()
