"""tests/ops_ledger_audit.py on simulated ledgers: a run with crashes and rollbacks audits
clean; each injected fault (a lost, a twice-accepted, a twice-trained, a phantom
trajectory) is found, and only that one."""
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import ops_ledger_audit  # noqa: E402


def simulate(rng):
    """A learner's ledger: trajectories arrive, steps train 3 each, checkpoints commit,
    crashes roll back to the last commit and the voided trajectories are trained again."""
    records, buffer, committed, step = [], [], 0, 0
    trained_since_commit = []  # (tid, step)
    for i in range(rng.randint(30, 60)):
        tid = f"traj-{rng.getrandbits(48):012x}-{i}"
        records.append({"kind": "ACCEPTED", "trajectory_id": tid, "lease_id": f"l{i}", "reward": rng.random()})
        buffer.append(tid)
        if rng.random() < 0.1:
            records.append({"kind": "DROPPED", "trajectory_id": buffer.pop(), "reason": "stale"})
        while len(buffer) >= 3:
            step += 1
            batch, buffer = buffer[:3], buffer[3:]
            for t in batch:
                records.append({"kind": "TRAINED", "trajectory_id": t, "step": str(step)})
                trained_since_commit.append((t, step))
            if rng.random() < 0.5:
                records.append({"kind": "COMMITTED", "step": str(step)})
                committed, trained_since_commit = step, []
            elif rng.random() < 0.3:  # kill -9: back to the last checkpoint
                records.append({"kind": "ROLLBACK", "step": str(committed)})
                buffer = [t for t, _ in trained_since_commit] + buffer
                trained_since_commit, step = [], committed
    while buffer:
        step += 1
        for t in buffer[:3]:
            records.append({"kind": "TRAINED", "trajectory_id": t, "step": str(step)})
        buffer = buffer[3:]
    records.append({"kind": "COMMITTED", "step": str(step)})
    return records


def findings(records):
    r = ops_ledger_audit.audit(records)
    return r["lost"], r["duplicated"], r["phantom"], r


def main():
    rng = random.Random(int.from_bytes(os.urandom(8), "little"))
    rollbacks = 0
    for _ in range(20):
        records = simulate(rng)
        rollbacks += sum(r["kind"] == "ROLLBACK" for r in records)
        lost, dup, phantom, summary = findings(records)
        assert (lost, dup, phantom) == ([], [], []), (lost, dup, phantom)
        assert summary["accepted"] == summary["trained"] + summary["dropped"], summary
        trained = [r for r in records if r["kind"] == "TRAINED"]
        accepted = [r["trajectory_id"] for r in records if r["kind"] == "ACCEPTED"]

        victim = rng.choice([r["trajectory_id"] for r in trained])
        # Lost: its last TRAINED record never happened.
        last = max(i for i, r in enumerate(records) if r.get("trajectory_id") == victim and r["kind"] == "TRAINED")
        lost, dup, phantom, _ = findings(records[:last] + records[last + 1:])
        assert (lost, dup, phantom) == ([victim], [], []), (victim, lost, dup, phantom)
        # Accepted twice (a retried push stored again).
        first = next(i for i, r in enumerate(records) if r.get("trajectory_id") == victim)
        lost, dup, phantom, _ = findings(records[:first + 1] + [dict(records[first])] + records[first + 1:])
        assert lost == [] and len(dup) == 1 and victim in dup[0] and phantom == [], dup
        # Trained again without a rollback in between.
        lost, dup, phantom, _ = findings(records + [{"kind": "TRAINED", "trajectory_id": victim, "step": "999"}])
        assert lost == [] and len(dup) == 1 and victim in dup[0], dup
        # Trained but never accepted.
        ghost = f"ghost-{rng.getrandbits(32)}"
        lost, dup, phantom, _ = findings(records + [{"kind": "TRAINED", "trajectory_id": ghost, "step": "1"}])
        assert phantom == [f"{ghost} trained, never accepted"], phantom
        assert len(set(accepted)) == len(accepted)
    assert rollbacks > 0, "the simulation never rolled back"

    # The command line: exit 0 on a clean ledger, 1 on a lost trajectory, --allow_buffered.
    records = simulate(rng)
    with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as tmp:
        path = os.path.join(tmp, "ledger.jsonl")
        script = os.path.join(os.path.dirname(__file__), "ops_ledger_audit.py")
        with open(path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
        assert subprocess.run([sys.executable, script, path]).returncode == 0
        with open(path, "a") as f:
            f.write(json.dumps({"kind": "ACCEPTED", "trajectory_id": "late-one"}) + "\n")
        assert subprocess.run([sys.executable, script, path], capture_output=True).returncode == 1
        assert subprocess.run([sys.executable, script, path, "--buffered=1"]).returncode == 0
        assert subprocess.run([sys.executable, script, path, "--buffered=2"], capture_output=True).returncode == 1
        # Durable files: one per accepted id (hex-encoded names, as the learner writes them).
        store = os.path.join(tmp, "trajectories")
        os.makedirs(store)
        ids = {r["trajectory_id"] for r in records if r["kind"] == "ACCEPTED"} | {"late-one"}
        for t in ids:
            open(os.path.join(store, t.encode().hex() + ".pb"), "w").close()
        args = [sys.executable, script, path, "--buffered=1", "--trajectories_dir=" + store]
        assert subprocess.run(args).returncode == 0
        os.remove(os.path.join(store, "late-one".encode().hex() + ".pb"))
        assert subprocess.run(args, capture_output=True).returncode == 1
    print(f"ledger audit: 20 simulated runs ({rollbacks} rollbacks) clean; 4 fault kinds found each time")


if __name__ == "__main__":
    main()
