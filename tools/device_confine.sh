#!/usr/bin/env bash
# Confinement on the GPU machine, one run in <= 150 s wall (docs/SANDBOX.md,
# "Filesystem view and identity", "readonly_root and CUDA").
#
#   here:   tools/device_sandbox.sh --prepare     # fills .devcarry/sandbox (sandbox_cli, libs)
#   device: OUT=$OUT bash tools/device_confine.sh (run tool, carry .devcarry/sandbox)
#
# 1. what CUDA writes on this host: with strace, every file a cuInit + torch
#    kernel opens for writing or creates (else the fds it holds);
# 2. cuInit + a torch kernel as uid 65534 with seccomp, the trusted side's
#    candidate env (contain.candidate_env: CUDA cache off, HOME/TMPDIR the
#    scratch), under (a) the constructed root (read-only but for scratch,
#    exchange, /proc), (b) the read-only host view (readonly_root, the
#    fallback: /proc writable again, /dev/shm the scratch), (c) as (b) with
#    /proc read-only again, as root before cuInit: the old failure, expected
#    error 304 (that is what broke GPU jobs); each probe also proves "/" and
#    /usr are read-only. If (a) fails: bisection over host paths added to
#    the view;
# 3. the worker (sandbox_cli, CUDA backend) with secrets planted (another
#    job's file in the work root, a worker config beside it, a
#    service-account token, a file in /root): tiny ReLU x2 (honest, must be
#    OK, contain log shows the view and identity 65534), every confine_* and
#    compile_* CUDA exploit (expected verdicts from EXPECTED.md), and no
#    verdict may carry a planted secret.
# 4. the health probe beside another process holding 1300 MiB on the GPU (as a
#    learner on the same GPU does): sandbox/tests/health_shared_gpu.py through the
#    real zygote; the second probe must stay healthy, its memory_rule naming the pid.
# Knobs: SUITE=0 skips 3; SUITE_WALL (85 s); WALL (20 s per verify).
# Everything lands in $OUT (cuda_writes.log, confine_probe.log, verdicts.jsonl, zygote.log).
set -u
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
CARRY=.devcarry/sandbox
OUT=${OUT:-/tmp/confine_device_out}
mkdir -p "$OUT"
PY=$(command -v python3)
export PYTHONPATH=$PWD/sandbox/harness PYTORCH_NVML_BASED_CUDA_CHECK=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
CONTAIN_SRCS=$(ls sandbox/contain/*.cc | grep -v -e _test.cc -e spawn.cc)
LIB=$PWD/$CARRY/libkernelrl_contain.so
STALE=0
for s in $CONTAIN_SRCS sandbox/contain/*.h; do [ "$s" -nt "$LIB" ] && STALE=1; done
if [ ! -f "$LIB" ] || [ $STALE = 1 ]; then
  mkdir -p /tmp/kr_confine
  LIB=/tmp/kr_confine/libkernelrl_contain.so
  g++ -std=c++17 -O2 -fPIC -shared -I. $CONTAIN_SRCS common/clock.cc -o "$LIB" > "$OUT/contain_build.log" 2>&1 ||
    { echo "contain g++ build FAILED:"; tail -20 "$OUT/contain_build.log"; exit 1; }
fi
# The carried build links Abseil's shared libraries (.devcarry/sandbox/lib); the g++ build links none.
. tools/device_libs.sh
device_lib_path "$CARRY" ldd "$LIB"
echo "contain lib: $LIB (at $(elapsed) s)"
echo "id: $(id)  kernel: $(uname -r)  gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"

# 1. What CUDA writes, unconfined.
echo "== 1. files cuInit + a torch kernel open for writing or create (at $(elapsed) s) =="
cat > /tmp/kr_confine_cuda.py <<'PYEOF'
import ctypes, os
print("cuInit:", ctypes.CDLL("libcuda.so.1").cuInit(0))
import torch
x = torch.ones(1 << 20, device="cuda") * 2
torch.cuda.synchronize()
print("torch kernel ok:", float(x.sum()) == 2.0 * (1 << 20))
fds = sorted({os.readlink(f"/proc/self/fd/{n}") for n in os.listdir("/proc/self/fd")})
print("fds held:", " ".join(f for f in fds if not f.startswith(("pipe:", "socket:", "anon_inode:"))))
PYEOF
if command -v strace > /dev/null; then
  timeout 40 strace -f -qq -o "$OUT/strace.log" -e trace=open,openat,creat,mkdir,mkdirat,unlink,unlinkat,rename,renameat2,memfd_create \
    $PY /tmp/kr_confine_cuda.py 2>&1 | tail -3
  grep -E 'O_WRONLY|O_RDWR|O_CREAT|mkdir|unlink|rename|creat\(|memfd_create' "$OUT/strace.log" | grep -v ENOENT |
    grep -oE '("[^"]*"|memfd_create\("[^"]*")' | sed 's/[0-9]\{3,\}/N/g' | sort | uniq -c | sort -rn | tee "$OUT/cuda_writes.log" | head -25
else
  echo "(no strace on this machine: the fds CUDA holds instead)"
  timeout 40 $PY /tmp/kr_confine_cuda.py 2>&1 | tail -3 | tee "$OUT/cuda_writes.log"
fi

# 2. The confined probes.
echo "== 2. cuInit + torch kernel as uid 65534, seccomp, candidate env (at $(elapsed) s) =="
timeout 60 $PY - "$LIB" "$OUT" <<'PYEOF' 2>&1 | tee "$OUT/confine_probe.log"
import ctypes, errno, json, os, signal, sys, tempfile
import contain
import torch  # imported before any fork, as in the zygote (never initialises CUDA here)

lib, out = sys.argv[1], sys.argv[2]
cont = contain.Contain(lib)  # the view's GPU lists: the library's defaults (sandbox/contain/view_defaults.cc)
caps = cont.probe()
print("host probe missing:", [k for k, v in caps.items() if not v] or "nothing")
ISO = {"user_ns": True, "pid_ns": True, "net_ns": True, "mount_ns": True, "ipc_ns": True, "mount_proc": True,
       "new_root": True, "identity": True}
SYS_mount_setattr, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 442, 0x8000, 1


class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]


def probe(iso, readonly_root=False, proc_ro=False, extra_ro=(), extra_dev=()):
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
            msg = {"ok": False}
            try:
                pol = contain.make_policy(iso, view, parent_death_signal=signal.SIGKILL, keep_fds=[w, 1, 2],
                                          readonly_root=int(readonly_root), scratch_dir=job["scratch_dir"],
                                          scratch_bytes=job["scratch_bytes"], writable_dirs=job["exchange_dir"],
                                          hidden_dirs=job["trusted_dir"], mount_proc=1)
                fails, log2 = cont.phase(pol, 2)
                msg.update(uid=os.getuid(), log2=log2[-1500:], phase2_failures=fails)
                os.environ.update(contain.candidate_env(job))
                if proc_ro:  # the old readonly_root: /proc read-only too (needs the privileges identity drops)
                    attr = MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
                    libc = ctypes.CDLL(None, use_errno=True)
                    rc = libc.syscall(ctypes.c_long(SYS_mount_setattr), ctypes.c_long(-100), ctypes.c_char_p(b"/proc"),
                                      ctypes.c_long(0), ctypes.byref(attr), ctypes.c_long(ctypes.sizeof(attr)))
                    msg["proc_ro"] = rc == 0 or os.strerror(ctypes.get_errno())
                for path in ("/kr_confine_probe", "/usr/kr_confine_probe"):
                    try:
                        open(path, "w").close()
                        msg.setdefault("writable", []).append(path)
                    except OSError as e:
                        msg.setdefault("refused", []).append(f"{path}: {errno.errorcode.get(e.errno, e.errno)}")
                msg["cuInit"] = ctypes.CDLL("libcuda.so.1").cuInit(0)
                torch.cuda.set_device(0)
                x = torch.ones(1024, device="cuda") * 2
                cont.phase(contain.make_policy({}, seccomp_profile=contain.KR_SECCOMP_CANDIDATE), 3)
                msg["ok"] = float((x + 1).sum().item()) == 3072.0
                msg["scratch"] = sorted(os.listdir(job["scratch_dir"]))
            except BaseException as e:  # noqa: BLE001
                msg["error"] = f"{type(e).__name__}: {e}"
            os.write(w, (json.dumps(msg) + "\n").encode())
            os._exit(0)
        st = cont.supervise(pid, 40)
        if st["signal"]:
            os.write(w, (json.dumps({"ok": False, "error": f"killed by signal {st['signal']}"}) + "\n").encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    os.waitpid(sup, 0)
    return json.loads(data.splitlines()[0]) if data else {"ok": False, "error": "no answer"}


def show(label, r, expect_ok=True):
    verdict = "as expected" if bool(r["ok"]) == expect_ok else "UNEXPECTED"
    print(f"{label}: ok={r['ok']} ({verdict}) uid={r.get('uid')} cuInit={r.get('cuInit')} "
          f"refused={r.get('refused')} writable={r.get('writable', [])} {r.get('error', '')[:200]}")


full = probe(ISO)
show("(a) constructed root, uid 65534", full)
print("    phase 2 log tail:\n      " + full.get("log2", "").strip()[-700:].replace("\n", "\n      "))
ro = probe({**ISO, "new_root": False}, readonly_root=True)
show("(b) read-only host view (readonly_root), uid 65534", ro)
print("    " + " | ".join(l for l in ro.get("log2", "").splitlines() if l.startswith(("readonly_root", "proc_rw", "dev_shm"))))
if os.geteuid() == 0:
    old = probe({**ISO, "new_root": False, "identity": False}, readonly_root=True, proc_ro=True)
    show(f"(c) as (b) with /proc read-only again (root; set: {old.get('proc_ro')})", old, expect_ok=False)
if not full["ok"]:
    print("== bisection: host paths added to the view until CUDA initialises ==")
    import glob
    every_dev = tuple(p for p in glob.glob("/dev/*") if not os.path.islink(p)
                      and p not in ("/dev/shm", "/dev/pts", "/dev/mqueue", "/dev/hugepages"))
    for label, extra_ro, dev in [("/dev (every node)", (), every_dev), ("/sys (whole)", ("/sys",), ()),
                                 ("/run", ("/run",), ()), ("/etc", ("/etc",), ()), ("/var/lib", ("/var/lib",), ()),
                                 ("everything above", ("/sys", "/run", "/etc", "/var/lib"), every_dev)]:
        r = probe(ISO, extra_ro=extra_ro, extra_dev=dev)
        print(f"  + {label}: ok={r['ok']} {r.get('error', '')[:160]}")
        if r["ok"]:
            print(f"  -> CUDA needs something under {label}: add it to SandboxConfig.view (or the defaults in "
                  "sandbox/contain/view_defaults.cc)")
            break
PYEOF
echo "probes done at $(elapsed) s"

# 3. The worker with planted secrets: honest ReLU, confine_* and compile_* exploits.
if [ "${SUITE:-1}" = 1 ]; then
  echo "== 3. worker suite (at $(elapsed) s) =="
  WORK=/tmp/kr_confine_suite
  SECRET="kr-secret-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
  PLANTED=()  # files, then the dirs made for them, removed in reverse at the end
  plant() {
    [ -e "$1" ] && return
    local made
    made=$(mkdir -pv "$(dirname "$1")" | sed -n "s/.*created directory '\(.*\)'/\1/p")
    printf '%s\n' "$2" > "$1" && PLANTED=("$1" $(echo "$made" | tac) "${PLANTED[@]}")
  }
  rm -rf "$WORK"; mkdir -p "$WORK"
  plant "$WORK/job-planted-other/workspace/notes.txt" "$SECRET"
  plant "$(dirname $WORK)/worker_config.textproto" "worker_id: \"$SECRET\""
  plant /var/run/secrets/kubernetes.io/serviceaccount/token "$SECRET"
  plant /root/kernelrl_confine_secret "$SECRET"
  SUITE_FILE=$OUT/suite.txt; : > "$SUITE_FILE"
  for i in 1 2; do
    echo "honest/relu_64x1024_$i sandbox/testdata/cpu_tasks/relu.py sandbox/solutions/level1/19_ReLU OK" >> "$SUITE_FILE"
  done
  for d in sandbox/exploits/cuda/confine_* sandbox/exploits/cuda/compile_*; do
    exp=$(head -1 "$d/model_new.py" | sed -n 's/.*Expected verdict: \([A-Z_]*\).*/\1/p')
    echo "exploit/$(basename "$d") sandbox/testdata/gpu_tasks/relu.py $d $exp" >> "$SUITE_FILE"
  done
  export LD_LIBRARY_PATH=$PWD/$CARRY/lib:${LD_LIBRARY_PATH:-}
  VCUDA=$PWD/$CARRY/libkernelrl_verify_cuda.so
  timeout "${SUITE_WALL:-85}" $CARRY/sandbox_cli --set=backend=cuda --set=python=$PY \
    --set=harness_dir=$PWD/sandbox/harness --set=contain_lib=$LIB ${VCUDA:+--set=verify_cuda_lib=$VCUDA} \
    --set=work_root=$WORK --set=verify.wall_seconds="${WALL:-20}" --suite="$SUITE_FILE" \
    --json_out="$OUT/verdicts.jsonl" 2> "$OUT/suite_stderr.log" > "$OUT/suite_table.txt"
  echo "suite rc=$? at $(elapsed) s (124 = cut by SUITE_WALL)"
  cp "$WORK/zygote.log" "$OUT/zygote.log" 2>/dev/null
  grep -h "^W " "$OUT/suite_stderr.log" | head -4
  grep -h "isolation probe\|dropped\|readonly_root" "$OUT/suite_stderr.log" "$OUT/zygote.log" 2>/dev/null | head -14
  $PY - "$OUT" "$SECRET" <<'PYEOF'
import json, sys
out, secret = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(f"{out}/verdicts.jsonl") if l.strip()]
def text(v):
    return json.dumps(v)
honest = [r for r in rows if r["label"].startswith("honest/")]
exp = [r for r in rows if r["label"].startswith("exploit/")]
for r in honest:
    v = r["verdict"]
    c = v.get("logs", {}).get("contain", "") + v.get("logs", {}).get("candidate", "")
    print(f"{r['label']:28s} {v.get('outcome','?'):10s} view={'root: filesystem view' in c} "
          f"new_root_ok={'new_root: ok' in c} uid65534={'identity (uid 65534' in c} "
          f"verify {next((s['wall_ms'] for s in v.get('stages', []) if s['stage'] == 'verify'), 0):.0f} ms")
good = sum(r["verdict"].get("outcome") == r["expected"] for r in exp)
print(f"confine/compile exploits with the expected verdict: {good}/{len(exp)}")
for r in exp:
    v = r["verdict"]
    mark = "" if v.get("outcome") == r["expected"] else f"  MISMATCH (expected {r['expected']})"
    print(f"  {r['label']:34s} {v.get('outcome', '?'):17s} {v.get('summary', '')[:90]}{mark}")
leaks = [r["label"] for r in rows if secret in text(r["verdict"]) or "LEAKED" in text(r["verdict"])]
print(f"verdicts carrying a planted secret or LEAKED: {len(leaks)} {leaks}")
PYEOF
  for f in "${PLANTED[@]}"; do [ -d "$f" ] && rmdir "$f" 2>/dev/null || rm -f "$f"; done
fi
echo "== 4. the health probe beside a foreign process on the GPU (at $(elapsed) s) =="
timeout 120 "$PY" sandbox/tests/health_shared_gpu.py "$LIB" 2>&1 | tail -12
echo "total $(elapsed) s"
