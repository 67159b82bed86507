"""Draws the max-similarity histogram data_synth computed (similarity.json) as a PNG.

    python3 -m data.harness.plot similarity.json similarity.png
"""
import json
import sys


def main(src, dst):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    h = json.load(open(src))
    bins = len(h["accepted"])
    lefts = [i / bins for i in range(bins)]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(lefts, h["all"], width=1 / bins, align="edge", color="#c8d6e5", edgecolor="white",
           label="all candidates past dedup")
    ax.bar(lefts, h["accepted"], width=1 / bins, align="edge", color="#2e86de", edgecolor="white",
           label="accepted tasks")
    ax.axvline(h["threshold"], color="#ee5253", linestyle="--", label=f"drop above {h['threshold']:.2f}")
    ax.set_xlim(0, 1)
    ax.set_xlabel("max AST similarity to any KernelBench program")
    ax.set_ylabel("tasks")
    ax.set_title("Decontamination: maximum similarity to KernelBench")
    ax.legend()
    fig.tight_layout()
    fig.savefig(dst, dpi=120)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
