"""Learning curves of a `kernelrl learn` run (tools/cli/learn_cmd.h), with matplotlib.

  learn_plots.py CURVES_JSON OUT_DIR

writes OUT_DIR/reward.png (mean reward per update on the trained trajectories, by stage, and on the
held-out tasks with its standard error), OUT_DIR/rates.png (pass rate, faster than eager, faster
than torch.compile: training batches and held-out evaluations) and OUT_DIR/stability.png (entropy,
explained variance, clip fraction and mean |log pi - log pi_rollout|, IS-ratio mean/min/max and the
masked fraction over PPO updates).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STAGE_COLORS = {"single_turn_ppo": "tab:purple", "rft": "tab:orange", "value_pretrain": "tab:gray",
                "agentic_ppo": "tab:blue"}


def series(steps, get):
    xs, ys = [], []
    for s in steps:
        v = get(s)
        if v is not None:
            xs.append(s["step"])
            ys.append(v)
    return xs, ys


def metric(name):
    return lambda s: s.get("metrics", {}).get(name)


def trained(name):
    return lambda s: s.get("trained", {}).get(name) if s.get("trained", {}).get("n") else None


def sampled(held):
    """True when every held-out evaluation ran more than one rollout per task."""
    return bool(held) and all(h.get("rollouts", {}).get("n", 0) > h.get("n", 0) for h in held)


def main():
    curves = json.load(open(sys.argv[1]))
    out = sys.argv[2]
    steps = [s for s in curves["steps"] if s.get("step", 0) > 0]
    held = curves.get("heldout", [])
    title = f"job {curves['job_id']} ({curves['backend']}, ablation {curves['ablation']})"
    # The held-out points sit at the update count the job had reached when they started.
    version_to_step = {s["policy_version"]: s["step"] for s in steps}
    hx = [version_to_step.get(h["policy_version"], h["policy_version"]) for h in held]

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for stage, color in STAGE_COLORS.items():
        xs, ys = series([s for s in steps if s["stage"] == stage], trained("reward_mean"))
        if xs:
            ax.plot(xs, ys, "o-", color=color, label=f"trained batch ({stage})", ms=3)
    if held:
        ax.errorbar(hx, [h["reward_mean"] for h in held], yerr=[h["reward_sem"] for h in held], fmt="s-",
                    color="tab:red", capsize=3, label="held-out, best of rollouts per task (+- s.e.m. over tasks)")
    if sampled(held):
        ax.errorbar(hx, [h["rollouts"]["reward_mean"] for h in held], yerr=[h["rollouts"]["reward_sem"] for h in held],
                    fmt="D-", color="tab:purple", capsize=3,
                    label="held-out, every rollout's final verdict (+- s.e.m. over rollouts)")
    ax.set_xlabel("update (policy version)")
    ax.set_ylabel("mean reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "reward.png"), dpi=110)

    fig, axes = plt.subplots(1, 3, figsize=(13, 4), sharey=True)
    for ax, key, name in zip(axes, ["pass_rate", "faster_than_eager_rate", "faster_than_compile_rate"],
                             ["pass rate", "faster than eager", "faster than torch.compile"]):
        xs, ys = series(steps, trained(key))
        ax.plot(xs, ys, "o-", ms=3, label="trained batches")
        if held:
            ax.plot(hx, [h[key] for h in held], "s-", color="tab:red", label="held-out (best of rollouts)")
        if sampled(held):
            ax.plot(hx, [h["rollouts"][key] for h in held], "D-", color="tab:purple", label="held-out (per rollout)")
        ax.set_title(name)
        ax.set_xlabel("update")
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "rates.png"), dpi=110)

    ppo = [s for s in steps if s["stage"] in ("single_turn_ppo", "agentic_ppo")]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    panels = [("entropy", ["entropy"]), ("explained variance", ["explained_variance"]),
              # How far the trained policy is from the rollouts', token by token (k3 KL is a few
              # outlier tokens' figure: the IS-ratio panel shows those).
              ("clip fraction, mean |log pi - log pi_rollout|, KL to the reference",
               ["clip_frac", "logp_abs_diff", "kl_ref"]),
              ("IS ratio (rollout vs trainer)", ["is_weight_mean", "is_weight_min", "is_weight_max",
                                                 "mask_frac"])]
    for ax, (name, keys) in zip(axes.flat, panels):
        for k in keys:
            xs, ys = series(ppo, metric(k))
            if xs:
                ax.plot(xs, ys, "o-", ms=3, label=k)
        ax.set_title(name)
        ax.set_xlabel("PPO update")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "stability.png"), dpi=110)
    print("plots:", ", ".join(os.path.join(out, f) for f in ("reward.png", "rates.png", "stability.png")))


if __name__ == "__main__":
    main()
