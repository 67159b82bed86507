#!/usr/bin/env bash
# Confinement on the GPU machine (docs/SANDBOX.md, "Filesystem view and identity").
#
#   here:   tools/device_sandbox.sh --prepare     # fills .devcarry/sandbox (contain lib, sandbox_cli, ...)
#   device: tools/device_confine.sh               # (run tool, carry .devcarry/sandbox)
#
# 1. what CUDA and torch open on this host: device nodes and files held open
#    after a kernel ran (/proc/self/fd), the shared objects mapped
#    (/proc/self/maps), the libraries the loader searched (LD_DEBUG=libs);
# 2. cuInit + a torch kernel inside the constructed root as uid 65534 (the
#    candidate's view: sandbox/harness/contain.py confine_fields, device cuda),
#    then the same with the root or the identity off, to name the step that
#    breaks CUDA if one does;
# 3. if the confined probe fails: bisection over host paths added to the view
#    (/dev whole, /sys whole, /run, /var/run, /etc, host /tmp, /dev/shm ...),
#    printing the first addition under which CUDA initialises;
# 4. the suite through the real worker (tools/device_sandbox.sh with
#    SUITE_FILTER: overhead, level-1 solutions, every CUDA exploit) so the
#    confine_* exploits, the 15 reference solutions' verdicts and the verify
#    wall p50 are measured under the new root (SUITE=0 skips it).
# Everything lands in $OUT (confine_probe.log, confine_bisect.log, the suite's files).
set -u
CARRY=.devcarry/sandbox
OUT=${OUT:-/tmp/confine_device_out}
mkdir -p "$OUT"
PY=$(command -v python3)
export PYTHONPATH=$PWD/sandbox/harness PYTORCH_NVML_BASED_CUDA_CHECK=1
LIB=$PWD/$CARRY/libkernelrl_contain.so
if [ ! -f "$LIB" ] || [ sandbox/contain/root.cc -nt "$LIB" ]; then
  mkdir -p /tmp/kr_confine
  LIB=/tmp/kr_confine/libkernelrl_contain.so
  g++ -std=c++17 -O2 -fPIC -shared -I. sandbox/contain/c_api.cc sandbox/contain/capabilities.cc \
    sandbox/contain/contain.cc sandbox/contain/fds.cc sandbox/contain/host_memory.cc sandbox/contain/identity.cc \
    sandbox/contain/mounts.cc sandbox/contain/namespaces.cc sandbox/contain/process.cc sandbox/contain/rlimits.cc \
    sandbox/contain/root.cc sandbox/contain/root_plan.cc sandbox/contain/seccomp.cc sandbox/contain/step_log.cc \
    sandbox/contain/watchdog.cc common/clock.cc -o "$LIB" > "$OUT/contain_build.log" 2>&1 ||
    { echo "contain g++ build FAILED:"; tail -20 "$OUT/contain_build.log"; exit 1; }
fi
echo "contain lib: $LIB"
id; uname -r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ls -la /dev/nvidia* 2>&1 | head -20
ls /proc/driver/nvidia 2>&1 | head; ls -la /dev/shm | head -5

# 1. What CUDA opens and maps, unconfined.
echo "== 1. files CUDA/torch hold after a kernel (unconfined) =="
LD_DEBUG=libs LD_DEBUG_OUTPUT=$OUT/ld_debug $PY - <<'PYEOF' 2>&1 | tee "$OUT/cuda_opens.log"
import ctypes, os
cuda = ctypes.CDLL("libcuda.so.1")
print("cuInit:", cuda.cuInit(0))
import torch
x = torch.ones(1 << 20, device="cuda") * 2
torch.cuda.synchronize()
print("torch kernel ok:", float(x.sum()) == 2.0 * (1 << 20))
fds = sorted({os.readlink(f"/proc/self/fd/{n}") for n in os.listdir("/proc/self/fd")
              if not os.readlink(f"/proc/self/fd/{n}").startswith(("pipe:", "socket:", "anon_inode:"))})
print("open fds:", *fds, sep="\n  ")
maps = sorted({l.split(None, 5)[-1].strip() for l in open("/proc/self/maps") if "/" in l})
dirs = sorted({os.path.dirname(m) for m in maps if m.startswith("/")})
print("mapped from dirs:", *dirs, sep="\n  ")
print("mapped non-library files:", *[m for m in maps if m.startswith("/") and ".so" not in m], sep="\n  ")
PYEOF
echo "libraries the loader searched (LD_DEBUG=libs, 'trying file'): $(cat $OUT/ld_debug.* 2>/dev/null | grep -c 'trying file')"
cat $OUT/ld_debug.* 2>/dev/null | grep -E "calling init|find library=libcuda|find library=libnvidia" | sed 's/^ *[0-9]*: *//' | sort -u | head -20

# 2./3. The confined probe, its variants and the bisection.
echo "== 2. cuInit + torch kernel in the constructed root as uid 65534 =="
$PY - "$LIB" "$OUT" <<'PYEOF' 2>&1 | tee "$OUT/confine_probe.log"
import json, os, signal, sys, tempfile
import contain
import torch  # imported before any fork, as in the zygote (never initialises CUDA here)

lib, out = sys.argv[1], sys.argv[2]
cont = contain.Contain(lib)
caps = cont.probe()
print("host probe:", {k: v for k, v in caps.items()})
ISO = {"user_ns": True, "pid_ns": True, "net_ns": True, "mount_ns": True, "ipc_ns": True, "mount_proc": True,
       "new_root": True, "identity": True}


def probe(iso, extra_ro=(), extra_dev=(), seccomp=True):
    root = tempfile.mkdtemp(prefix="kr-confine-")
    job = {d + "_dir": os.path.join(root, d) for d in ("scratch", "exchange", "workspace", "trusted")}
    for d in job.values():
        os.makedirs(d)
    job["scratch_bytes"] = 64 << 20
    view = contain.confine_fields(job, iso, caps, "cuda")
    if view.get("new_root"):
        view["ro_paths"] = ":".join([view["ro_paths"], *extra_ro])
        view["dev_paths"] = ":".join([view["dev_paths"], *extra_dev])
    r, w = os.pipe()
    sup = os.fork()
    if sup == 0:
        os.close(r)
        _, log1 = cont.phase(contain.make_policy(iso, view, parent_death_signal=signal.SIGKILL,
                                                 new_process_group=1), 1)
        pid = os.fork()
        if pid == 0:
            msg = {"ok": False, "log1": log1}
            try:
                pol = contain.make_policy(iso, view, parent_death_signal=signal.SIGKILL, keep_fds=[w, 1, 2])
                fails, log2 = cont.phase(pol, 2)
                msg.update(uid=os.getuid(), log2=log2, phase2_failures=fails, root=sorted(os.listdir("/")))
                import ctypes
                msg["cuInit"] = ctypes.CDLL("libcuda.so.1").cuInit(0)
                torch.cuda.set_device(0)
                x = torch.ones(1024, device="cuda") * 2
                if seccomp:
                    cont.phase(contain.make_policy({}, seccomp_profile=contain.KR_SECCOMP_CANDIDATE), 3)
                msg["ok"] = float((x + 1).sum().item()) == 3072.0
                msg["dev"] = sorted(os.listdir("/dev"))
            except BaseException as e:  # noqa: BLE001
                msg["error"] = f"{type(e).__name__}: {e}"
            os.write(w, (json.dumps(msg) + "\n").encode())
            os._exit(0)
        st = cont.supervise(pid, 90)
        if st["signal"]:
            os.write(w, (json.dumps({"ok": False, "error": f"killed by signal {st['signal']}"}) + "\n").encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(sup, 0)
    return json.loads(data.splitlines()[0]) if data else {"ok": False, "error": "no answer"}


full = probe(ISO)
print(f"confined (new root + uid 65534 + seccomp): ok={full['ok']} uid={full.get('uid')} cuInit={full.get('cuInit')} "
      f"{full.get('error', '')}")
print("  / =", full.get("root"))
print("  /dev =", full.get("dev"))
print("  phase 1 log:\n    " + full.get("log1", "").replace("\n", "\n    "))
print("  phase 2 log:\n    " + full.get("log2", "").replace("\n", "\n    "))
for name, iso in (("new root, no identity", {**ISO, "identity": False}),
                  ("identity, no new root", {**ISO, "new_root": False}),
                  ("neither", {**ISO, "new_root": False, "identity": False})):
    r = probe(iso)
    print(f"variant {name}: ok={r['ok']} uid={r.get('uid')} {r.get('error', '')}")
if not full["ok"]:
    print("== 3. bisection: host paths added to the view until CUDA initialises ==")
    import glob
    every_dev = tuple(p for p in glob.glob("/dev/*") if not os.path.islink(p)
                      and p not in ("/dev/shm", "/dev/pts", "/dev/mqueue", "/dev/hugepages"))
    tries = [("/dev (every node)", (), every_dev), ("/sys (whole)", ("/sys",), ()), ("/run", ("/run",), ()),
             ("/var/run", ("/var/run",), ()), ("/etc", ("/etc",), ()), ("/dev/shm (host)", (), ("/dev/shm",)),
             ("/var/lib/nvidia*", tuple(p for p in ("/var/lib/nvidia", "/var/lib/nvidia-persistenced")
                                        if os.path.exists(p)), ()),
             ("/opt", ("/opt",), ()), ("everything above", ("/sys", "/run", "/etc", "/opt"), every_dev)]
    for label, ro, dev in tries:
        r = probe(ISO, ro, dev)
        print(f"  + {label}: ok={r['ok']} {r.get('error', '')[:200]}")
        if r["ok"]:
            print(f"  -> CUDA needs something under {label}; add it to GPU_RO_PATHS/GPU_DEV_PATHS in contain.py")
            break
PYEOF

# 4. The worker's suite under the new root (the confine_* exploits included).
if [ "${SUITE:-1}" = 1 ]; then
  echo "== 4. suite through the worker (tools/device_sandbox.sh) =="
  OUT=$OUT SUITE_FILTER="${SUITE_FILTER:-overhead|level1|level2|exploit/}" SUITE_WALL="${SUITE_WALL:-420}" \
    bash tools/device_sandbox.sh
  grep -h "root: filesystem view\|identity (uid" "$OUT/zygote.log" 2>/dev/null | head -3
  $PY - "$OUT" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/verdicts.jsonl") if l.strip()]
conf = [r for r in rows if r["label"].startswith("exploit/confine_")]
print(f"confine exploits with the expected verdict: {sum(r['verdict'].get('outcome') == r['expected'] for r in conf)}/{len(conf)}")
for r in conf:
    print(f"  {r['label']:36s} {r['verdict'].get('outcome', '?'):10s} {r['verdict'].get('summary', '')[:110]}")
l1 = [next((s['wall_ms'] for s in r['verdict'].get('stages', []) if s['stage'] == 'verify'), 0) / 1e3
      for r in rows if r["label"].startswith("level1/")]
if l1:
    print(f"level-1 verify wall p50 under the new root: {statistics.median(l1):.2f} s (n={len(l1)}; goal <= 1.2 s)")
logs = [r["verdict"].get("logs", {}).get("contain", "") for r in rows]
print("verdicts whose contain log names the view:", sum("root: filesystem view" in c for c in logs), "/", len(logs))
PYEOF
fi
