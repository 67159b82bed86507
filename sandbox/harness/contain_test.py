"""The harness's side of the containment table, against the real library:
KrPolicy's ctypes mirror is checked at load and a mismatch refuses to load;
a capability the probe did not report is absent (no step, no constructed
root, no identity), and a step the library does not know is off.

    python3 contain_test.py [path/to/libkernelrl_contain.so]"""
import ctypes
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import contain  # noqa: E402

FAILS = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILS.append(what)


def lib_path():
    if len(sys.argv) > 1:
        return sys.argv[1]
    return os.path.join(os.getcwd(), "sandbox", "contain", "libkernelrl_contain.so")


def mirror(fields):
    return type("Mirror", (ctypes.Structure,), {"_fields_": fields})


def layout_checks(cont):
    contain.check_layout(cont.lib)  # the real mirror passes
    check(True, "the harness's KrPolicy mirror matches the library")
    fields = list(contain.KrPolicy._fields_)
    # Two int fields swapped: same size, different offsets.
    i = random.choice([k for k in range(len(fields) - 1)
                       if fields[k][1] is ctypes.c_int and fields[k + 1][1] is ctypes.c_int])
    swapped = fields[:i] + [fields[i + 1], fields[i]] + fields[i + 2:]
    for what, struct in (("two fields swapped", mirror(swapped)),
                         ("a field missing", mirror(fields[:-1])),
                         ("a field added", mirror(fields + [("extra", ctypes.c_int)]))):
        try:
            contain.check_layout(cont.lib, struct)
            check(False, f"a mirror with {what} is refused")
        except contain.LayoutError as e:
            check(True, f"a mirror with {what} is refused ({e})")


def capability_checks(cont):
    full = {name: True for name in cont.cap_bits}
    check(set(cont.probe()) == set(cont.cap_bits), "probe() names every capability the library has")
    iso = {"new_root": True, "identity": True, "seccomp": True, "mount_ns": True, "net_ns": True,
           "data_limit": True, "no_such_step": True}
    check(cont.allowed_isolation(iso, full) == {**iso, "no_such_step": False},
          "a full host allows every known step, never an unknown one")
    missing = random.choice(["seccomp", "net_ns", "pivot_root", "mount_ns"])
    partial = {k: v for k, v in full.items() if k != missing}
    got = cont.allowed_isolation(iso, partial)
    gated = {"seccomp": "seccomp", "net_ns": "net_ns", "pivot_root": "new_root", "mount_ns": "mount_ns"}[missing]
    check(got[gated] is False, f"{gated} is off when the probe does not name {missing}")
    check(got["data_limit"] is True, "data_limit needs nothing of the host")
    check(not any(v for k, v in cont.allowed_isolation(iso, {}).items() if k != "data_limit"),
          "an empty probe allows no step but the rlimit")

    every = {k: True for k in ("user_ns", "pid_ns", "net_ns", "mount_ns", "ipc_ns", "readonly_root", "mount_proc",
                               "seccomp", "data_limit", "new_root", "identity")}
    p = cont.candidate_policy(every, full, scratch_dir="/nonexistent/scratch", nofile=4096)
    check((p.user_ns, p.pid_ns, p.net_ns, p.mount_ns, p.ipc_ns, p.readonly_root, p.mount_proc, p.new_root)
          == (1,) * 8 and p.seccomp_profile == contain.KR_SECCOMP_CANDIDATE and p.run_as_uid == contain.SANDBOX_UID
          and p.nofile == 4096 and p.scratch_dir == b"/nonexistent/scratch",
          "a candidate on a full host gets every step from the library's table, and its own paths and limits")
    p = cont.candidate_policy(every, {})
    check((p.user_ns, p.pid_ns, p.net_ns, p.mount_ns, p.new_root, p.seccomp_profile, p.run_as_uid) == (0,) * 7,
          "a candidate gets no step from an empty probe")
    p = cont.candidate_policy(every, partial)
    off = {"seccomp": p.seccomp_profile, "net_ns": p.net_ns, "pivot_root": p.new_root, "mount_ns": p.mount_ns}[missing]
    check(off == 0, f"a candidate's {gated} is off when the probe does not name {missing}")

    job = {"scratch_dir": "/nonexistent/scratch", "exchange_dir": "/nonexistent/exchange",
           "workspace_dir": "/nonexistent/ws"}
    on = {"identity": True, "new_root": True, "mount_ns": True, "pid_ns": True, "mount_proc": True}
    fields = contain.confine_fields(job, on, full)
    check(fields.get("new_root") == 1 and fields.get("run_as_uid") == contain.SANDBOX_UID,
          "a full host gets the constructed root and the sandbox identity")
    no_pivot = {k: v for k, v in full.items() if k != "pivot_root"}
    check("new_root" not in contain.confine_fields(job, on, no_pivot),
          "no constructed root when the probe does not name pivot_root")
    check(contain.confine_fields(job, on, {}) == {}, "no view and no identity from an empty probe")
    check(contain.confine_fields(job, on, None) == {}, "no view and no identity without a probe")


def python_view_checks():
    """The interpreter's view is computed again only when modules were
    imported since (the zygote computes it before each fork, once in effect)."""
    first = contain.python_view()
    check(first is contain.python_view(), "the view is kept while no module is imported")
    check(os.path.dirname(os.path.abspath(contain.__file__)) in first, "the view holds the harness's own dir")
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        name = f"kr_view_probe_{random.randrange(1 << 30)}"
        with open(os.path.join(d, name + ".py"), "w") as f:
            f.write("X = 1\n")
        sys.path.insert(0, d)
        try:
            __import__(name)
            after = contain.python_view()
            check(after is not first and os.path.realpath(d) in after,
                  "a module imported since adds its dir")
        finally:
            sys.path.remove(d)
            sys.modules.pop(name, None)


def main():
    path = lib_path()
    if not os.path.exists(path):
        print(f"FAIL libkernelrl_contain.so not found at {path}")
        return 1
    cont = contain.Contain(path)
    layout_checks(cont)
    capability_checks(cont)
    python_view_checks()
    print(f"{len(FAILS)} failed" if FAILS else "all passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
