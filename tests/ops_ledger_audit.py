"""Audits a learner job's ledger (learner/rl/ledger.h): was any trajectory lost or trained twice?

The ledger is JSON lines of kernelrl.v1.LedgerRecord (proto field names, enums by name,
int64 as strings). Read in order:
  ACCEPTED  trajectory stored and acked (a second ACCEPTED of one id is a duplicate);
  TRAINED   consumed by the update of `step`; ROLLBACK to step s voids TRAINED of later steps
            (the learner restarted from checkpoint s and will train them again);
  DROPPED / INFRA_ERROR  left untrained on purpose, with a reason.
Findings:
  duplicated: an id ACCEPTED twice, or TRAINED twice without a ROLLBACK between;
  lost:       ACCEPTED but neither (validly) TRAINED nor DROPPED nor INFRA_ERROR;
  phantom:    TRAINED or DROPPED without ever being ACCEPTED.

  python3 tests/ops_ledger_audit.py LEDGER [--buffered=N] [--trajectories_dir=DIR]
prints a summary and exits 1 on any finding. --buffered: the job ended with exactly N accepted
trajectories still untrained in its buffer (its buffer_depth), so exactly N may be untrained.
--trajectories_dir: the job's durable trajectory files (hex-encoded ids): every accepted
trajectory must have one, and no file may lack an ACCEPTED record.
"""
import collections
import json
import sys


def read(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def audit(records):
    accepted = collections.Counter()
    trained = {}  # trajectory_id -> step, for TRAINED records still valid
    dropped = set()
    duplicated, phantom = [], []
    counts = collections.Counter(r.get("kind", "KIND_UNSPECIFIED") for r in records)
    for r in records:
        kind, tid = r.get("kind"), r.get("trajectory_id", "")
        step = int(r.get("step", 0))
        if kind == "ACCEPTED":
            accepted[tid] += 1
            if accepted[tid] == 2:
                duplicated.append(f"{tid} accepted twice")
        elif kind == "TRAINED":
            if tid not in accepted:
                phantom.append(f"{tid} trained, never accepted")
            elif tid in trained:
                duplicated.append(f"{tid} trained at steps {trained[tid]} and {step}")
            else:
                trained[tid] = step
        elif kind == "ROLLBACK":
            trained = {t: s for t, s in trained.items() if s <= step}
        elif kind in ("DROPPED", "INFRA_ERROR"):
            if kind == "DROPPED" and tid not in accepted:
                phantom.append(f"{tid} dropped, never accepted")
            if tid:
                dropped.add(tid)
    lost = sorted(t for t in accepted if t not in trained and t not in dropped)
    return {"counts": dict(counts), "accepted": len(accepted), "trained": len(trained),
            "dropped": len(dropped & set(accepted)), "lost": lost, "duplicated": duplicated, "phantom": phantom,
            "steps": sorted(set(trained.values()))}


def main(argv):
    buffered, trajectories_dir = 0, None
    paths = []
    for a in argv[1:]:
        if a.startswith("--buffered="):
            buffered = int(a.split("=", 1)[1])
        elif a.startswith("--trajectories_dir="):
            trajectories_dir = a.split("=", 1)[1]
        else:
            paths.append(a)
    if len(paths) != 1:
        print(__doc__)
        return 2
    records = read(paths[0])
    result = audit(records)
    print(f"ledger {paths[0]}: {result['counts']}")
    print(f"  {result['accepted']} trajectories accepted, {result['trained']} trained once "
          f"(steps {result['steps']}), {result['dropped']} dropped, {len(result['lost'])} untrained, "
          f"{len(result['duplicated'])} duplicated, {len(result['phantom'])} phantom")
    bad = result["duplicated"] + result["phantom"]
    if len(result["lost"]) != buffered:
        bad += [f"{len(result['lost'])} accepted trajectories untrained, the buffer holds {buffered}"]
        bad += [f"{t} accepted but never trained or dropped" for t in result["lost"]][:20]
    if trajectories_dir is not None:
        import os
        on_disk = {bytes.fromhex(os.path.splitext(n)[0]).decode() for n in os.listdir(trajectories_dir)}
        accepted = {r.get("trajectory_id") for r in records if r.get("kind") == "ACCEPTED"}
        bad += [f"{t} accepted but not durable in {trajectories_dir}" for t in sorted(accepted - on_disk)]
        bad += [f"{t} stored without an ACCEPTED record" for t in sorted(on_disk - accepted)]
        print(f"  {len(on_disk)} trajectory files, one per accepted trajectory: {on_disk == accepted}")
    for b in bad:
        print("  FINDING:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
