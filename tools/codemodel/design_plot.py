"""Draws design_report's per-family design distribution over policy versions.

  design_plot.py DESIGN_REPORT.json OUT.png

One panel per family: for each policy-version bucket, the share of trajectories whose final kernel
has each design (choice digits; "none": no kernel written, "other": not a clean rendering). Prints,
per task, its designs tried at least twice by the model: how often, their mean reward and median
speed-up vs torch.compile (design_report's designs_by_task): whether the reward told them apart;
and per family, by policy-version bucket, how many of the model's kernels had the task's op lines
right and wrong (design_report's op_lines).
"""
import json
import sys


def main():
    report = json.load(open(sys.argv[1]))
    for task, designs in sorted(report.get("designs_by_task", {}).items()):
        tried = sorted(((d, o) for d, o in designs.items() if o["n"] >= 2), key=lambda x: -x[1]["reward_mean"])
        print(f"{task}: " + ("; ".join(f"{d} n={o['n']} reward {o['reward_mean']:.2f} {o['speedup_vs_compile_median']:.2f}x compile"
                                       for d, o in tried) or "no design tried twice"))
    for family, rows in sorted(report.get("designs_by_family", {}).items()):
        lines = [(r["versions"], r["op_lines"]) for r in rows if "op_lines" in r]
        if lines:
            print(f"{family}: op lines right/wrong by policy versions: " +
                  ", ".join(f"{v} {o.get('right', 0)}/{o.get('wrong', 0)}" for v, o in lines))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
