#include "sandbox/contain/root_plan.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <utility>

#include "sandbox/contain/path_util.h"

namespace kernelrl::sandbox {
namespace {

// What every contained process gets, read-only: the system's programs and
// libraries (/usr; /bin, /lib... are links into it on merged-/usr hosts),
// what the dynamic linker reads, the compilers' alternatives links, and the
// CPU topology torch's cpuinfo reads. Nothing else of /etc, no /home, /root,
// /var, /run, /opt, /srv, /mnt.
const char* const kSystemPaths[] = {
    "/usr",           "/bin",          "/sbin",          "/lib",
    "/lib32",         "/lib64",        "/libx32",        "/etc/ld.so.cache",
    "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime",
    "/sys/devices/system/cpu", "/sys/devices/system/node",
};

const char* const kDevNodes[] = {"null", "zero", "full", "random", "urandom"};

std::string Canonical(const std::string& path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) != nullptr ? std::string(buf) : std::string();
}

std::string ReadLink(const std::string& path) {
  char buf[PATH_MAX];
  ssize_t n = readlink(path.c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : std::string();
}

// Records, as symlinks of the view, every symlink met on the way down `path`
// (e.g. /bin -> usr/bin, /usr/local/cuda -> cuda-13.0), so the path resolves
// inside the view as it does on the host. Returns the canonical path.
std::string AddLinksOnTheWay(const std::string& path, std::vector<RootEntry>& links) {
  std::string cur = path;
  for (int hops = 0; hops < 16; ++hops) {
    std::string prefix;
    size_t pos = 1;
    bool found = false;
    while (pos <= cur.size()) {
      size_t next = cur.find('/', pos);
      if (next == std::string::npos) next = cur.size();
      prefix = cur.substr(0, next);
      struct stat st;
      if (lstat(prefix.c_str(), &st) != 0) return "";
      if (S_ISLNK(st.st_mode)) {
        links.push_back({RootEntry::kSymlink, prefix, ReadLink(prefix), false});
        const std::string target = Canonical(prefix);
        if (target.empty()) return "";
        cur = target + cur.substr(next);
        found = true;
        break;
      }
      pos = next + 1;
    }
    if (!found) return Canonical(cur);
  }
  return "";
}

bool ContainsAny(const std::string& dir, const std::vector<std::string>& paths) {
  for (const std::string& p : paths) {
    if (!p.empty() && IsUnder(p, dir)) return true;
  }
  return false;
}

std::string Passwd(int uid, int gid) {
  return "root:x:0:0:root:/:/usr/sbin/nologin\nnobody:x:" + std::to_string(uid) + ":" + std::to_string(gid) +
         ":sandbox:/tmp:/usr/sbin/nologin\n";
}

std::string Group(int gid) { return "root:x:0:\nnogroup:x:" + std::to_string(gid) + ":\n"; }

}  // namespace

RootPlan PlanRoot(const KrPolicy& p) {
  RootPlan plan;
  const bool has_scratch = p.scratch_dir != nullptr && p.scratch_dir[0] != '\0';
  const std::string scratch = has_scratch ? Canonical(p.scratch_dir) : "";
  plan.root_dir = p.root_dir != nullptr && p.root_dir[0] != '\0' ? Canonical(p.root_dir) : scratch;
  plan.scratch_bytes = p.scratch_bytes > 0 ? p.scratch_bytes : (64ll << 20);
  std::vector<std::string> writable;
  for (const std::string& w : SplitColons(p.writable_dirs)) {
    const std::string c = Canonical(w);
    if (c.empty()) {
      plan.skipped.push_back(w + " (writable dir missing)");
    } else {
      writable.push_back(c);
    }
  }
  // Read-only paths: canonical, sorted (a parent before its children), the
  // ones inside an already bound tree dropped.
  std::vector<RootEntry> links;
  std::vector<std::string> wanted(std::begin(kSystemPaths), std::end(kSystemPaths));
  for (const std::string& extra : SplitColons(p.ro_paths)) wanted.push_back(extra);
  std::vector<std::string> job_dirs = writable;
  job_dirs.push_back(scratch);
  job_dirs.push_back(plan.root_dir);
  std::set<std::string> ro, handed;
  for (const std::string& d : SplitColons(p.job_ro_dirs)) {
    const std::string c = Canonical(d);
    if (c.empty() || ContainsAny(c, job_dirs)) {
      plan.skipped.push_back(d + (c.empty() ? " (job dir missing)" : " (contains the job's own directories)"));
    } else {
      handed.insert(c);
      wanted.push_back(c);
    }
  }
  for (const std::string& w : wanted) {
    struct stat st;
    if (w.empty() || w[0] != '/' || lstat(w.c_str(), &st) != 0) {
      if (!w.empty() && std::find(std::begin(kSystemPaths), std::end(kSystemPaths), w) == std::end(kSystemPaths)) {
        plan.skipped.push_back(w + " (missing)");
      }
      continue;
    }
    const std::string c = AddLinksOnTheWay(w, links);
    if (c.empty()) {
      plan.skipped.push_back(w + " (dangling link)");
    } else if (ContainsAny(c, job_dirs)) {
      plan.skipped.push_back(w + " (contains the job's own directories)");
    } else {
      ro.insert(c);
    }
  }
  std::vector<std::string> bound;
  for (const std::string& c : ro) {
    if (std::any_of(bound.begin(), bound.end(), [&](const std::string& b) { return IsUnder(c, b); })) continue;
    bound.push_back(c);
    struct stat st;
    stat(c.c_str(), &st);
    plan.entries.push_back({RootEntry::kBindRo, c, c, S_ISDIR(st.st_mode), handed.count(c) > 0});
  }
  // Links inside a bound tree exist there already.
  std::set<std::string> seen;
  for (const RootEntry& l : links) {
    const bool inside = std::any_of(bound.begin(), bound.end(), [&](const std::string& b) { return IsUnder(l.path, b); });
    if (!inside && seen.insert(l.path).second) plan.entries.push_back(l);
  }
  for (const std::string& w : writable) plan.entries.push_back({RootEntry::kBindRw, w, w, true});
  if (!scratch.empty()) {
    plan.entries.push_back({RootEntry::kScratch, scratch, "", true});
    // /tmp is the scratch, unless a job dir lives under /tmp (it would be covered).
    bool job_under_tmp = IsUnder(scratch, "/tmp") || ContainsAny("/tmp", writable) ||
                         std::any_of(bound.begin(), bound.end(), [](const std::string& b) { return IsUnder(b, "/tmp"); });
    if (job_under_tmp) {
      plan.skipped.push_back("/tmp as scratch (job dirs live under /tmp; TMPDIR points at the scratch)");
    } else {
      plan.entries.push_back({RootEntry::kTmpAlias, "/tmp", scratch, true});
    }
  }
  plan.entries.push_back({RootEntry::kDev, "/dev", "", true});
  std::vector<std::string> nodes;
  for (const char* n : kDevNodes) nodes.push_back(std::string("/dev/") + n);
  for (const std::string& d : SplitColons(p.dev_paths)) nodes.push_back(d);
  for (const std::string& n : nodes) {
    struct stat st;
    if (n.rfind("/dev/", 0) != 0 || n.find("/..") != std::string::npos || stat(n.c_str(), &st) != 0) {
      plan.skipped.push_back(n + " (no such device)");
      continue;
    }
    plan.entries.push_back({RootEntry::kDevNode, n, n, S_ISDIR(st.st_mode)});
  }
  for (const auto& [name, target] : {std::pair<const char*, const char*>{"fd", "/proc/self/fd"},
                                     {"stdin", "/proc/self/fd/0"},
                                     {"stdout", "/proc/self/fd/1"},
                                     {"stderr", "/proc/self/fd/2"}}) {
    plan.entries.push_back({RootEntry::kSymlink, std::string("/dev/") + name, target, false});
  }
  if (!scratch.empty()) plan.entries.push_back({RootEntry::kSymlink, "/dev/shm", scratch, false});
  plan.entries.push_back({RootEntry::kProc, "/proc", "", true});
  const int uid = p.run_as_uid > 0 ? p.run_as_uid : 65534;
  const int gid = p.run_as_gid > 0 ? p.run_as_gid : 65534;
  plan.entries.push_back({RootEntry::kFile, "/etc/passwd", Passwd(uid, gid), false});
  plan.entries.push_back({RootEntry::kFile, "/etc/group", Group(gid), false});
  plan.entries.push_back({RootEntry::kFile, "/etc/hosts", "127.0.0.1 localhost\n", false});
  return plan;
}

std::string DescribeRootPlan(const RootPlan& plan) {
  std::string ro, rw, links, dev, files, scratch;
  for (const RootEntry& e : plan.entries) {
    switch (e.kind) {
      case RootEntry::kBindRo: ro += (ro.empty() ? "" : " ") + e.path; break;
      case RootEntry::kBindRw: rw += (rw.empty() ? "" : " ") + e.path; break;
      case RootEntry::kSymlink: links += (links.empty() ? "" : " ") + e.path + "->" + e.source; break;
      case RootEntry::kScratch: {
        char size[64];
        std::snprintf(size, sizeof(size), "%.1f MiB", plan.scratch_bytes / 1048576.0);
        scratch = e.path + " (tmpfs " + size + ")";
        break;
      }
      case RootEntry::kTmpAlias: scratch += ", also at /tmp"; break;
      case RootEntry::kDevNode: dev += (dev.empty() ? "" : " ") + e.path.substr(5); break;
      case RootEntry::kFile: files += (files.empty() ? "" : " ") + e.path; break;
      case RootEntry::kDev:
      case RootEntry::kProc: break;
    }
  }
  std::string out = "root: filesystem view (tmpfs root staged at " + plan.root_dir +
                    ", read-only; nothing of the host but what is listed)\n";
  out += "root:   read-only: " + ro + "\n";
  out += "root:   writable: " + (rw.empty() ? std::string("-") : rw) + "\n";
  out += "root:   scratch: " + (scratch.empty() ? std::string("-") : scratch) + "\n";
  out += "root:   /dev: " + dev + "; /proc: fresh; generated: " + files + "\n";
  out += "root:   links: " + links + "\n";
  if (!plan.skipped.empty()) {
    std::string s;
    for (const std::string& k : plan.skipped) s += (s.empty() ? "" : "; ") + k;
    out += "root:   not in the view: " + s + "\n";
  }
  return out;
}

std::vector<std::string> ToolPaths(const std::string& tool, const std::string& path_env) {
  std::vector<std::string> out;
  std::string found;
  if (tool.find('/') != std::string::npos) {
    found = tool;
  } else {
    for (const std::string& dir : SplitColons(path_env.c_str())) {
      const std::string cand = dir + "/" + tool;
      if (access(cand.c_str(), X_OK) == 0) {
        found = cand;
        break;
      }
    }
  }
  if (found.empty()) return out;
  // …/bin/tool -> … for the name as found (a pyenv shim: the pyenv root) and
  // for what it resolves to (the interpreter's own prefix, the toolkit).
  for (const std::string& f : {found, Canonical(found)}) {
    if (f.empty()) continue;
    const std::string bin = f.substr(0, f.rfind('/'));
    const std::string prefix = bin.substr(0, bin.rfind('/'));
    out.push_back(prefix.empty() ? bin : prefix);
  }
  return out;
}

}  // namespace kernelrl::sandbox
