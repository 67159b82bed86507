// kprof: CUPTI activity recorder for the trusted timing harness (see kprof.h).
//
// Records arrive asynchronously in CUPTI buffers; BufferCompleted copies the
// few fields we use into `g.acts` (kernels, memcpys, memsets) and the
// correlation-id -> thread-id map (runtime/driver API records). Window
// assignment happens in kprof_window_end, after the caller's full device sync
// and a CUPTI flush have delivered every record that started in the window.
#include "profiler_service/cupti/kprof.h"

#include <cuda.h>
#include <cupti.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace {

enum ActKind : uint8_t { kKernel = 0, kMemcpy = 1, kMemset = 2 };
const char* KindName(uint8_t k) {
  return k == kKernel ? "kernel" : (k == kMemcpy ? "memcpy" : "memset");
}

struct Activity {
  uint64_t start = 0, end = 0;
  uint32_t stream = 0, correlation = 0, name_id = 0;
  uint8_t kind = kKernel;
  int window = -2;  // -2 unassigned, -1 outside every window.
};

struct Window {
  uint64_t begin = 0, end = 0;
  int tag = 0;
  uint32_t tid = 0;
  bool open = false;
};

struct State {
  std::mutex mu;  // Guards acts, names, corr_tid (CUPTI's buffer thread writes them).
  std::vector<Activity> acts;
  std::vector<std::string> names;
  std::unordered_map<std::string, uint32_t> name_ids;
  std::unordered_map<uint32_t, uint32_t> corr_tid;
  size_t assigned_upto = 0;
  std::vector<Window> windows;
  std::set<uint32_t> harness_tids;
  uint64_t dropped = 0;
  bool active = false;
  std::string error;
};
State g;

uint32_t Tid() { return static_cast<uint32_t>(syscall(SYS_gettid)); }

void SetError(const std::string& what) { g.error = what; }

bool CuptiOk(CUptiResult r, const char* call) {
  if (r == CUPTI_SUCCESS) return true;
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  SetError(std::string(call) + ": " + (s ? s : "unknown CUPTI error"));
  return false;
}

bool CuOk(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return true;
  const char* s = nullptr;
  cuGetErrorString(r, &s);
  SetError(std::string(call) + ": " + (s ? s : "unknown CUDA error"));
  return false;
}

uint32_t InternLocked(const std::string& name) {
  auto it = g.name_ids.find(name);
  if (it != g.name_ids.end()) return it->second;
  uint32_t id = static_cast<uint32_t>(g.names.size());
  g.names.push_back(name);
  g.name_ids.emplace(name, id);
  return id;
}

const char* MemcpyName(uint8_t copy_kind) {
  switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy_HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy_DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy_DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "memcpy_PtoP";
    default: return "memcpy_other";
  }
}

constexpr size_t kBufferBytes = 8 << 20;

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(g.mu);
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(record);
        Activity a;
        a.start = k->start; a.end = k->end; a.stream = k->streamId;
        a.correlation = k->correlationId; a.kind = kKernel;
        a.name_id = InternLocked(k->name ? k->name : "<unnamed>");
        g.acts.push_back(a);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(record);
        Activity a;
        a.start = m->start; a.end = m->end; a.stream = m->streamId;
        a.correlation = m->correlationId; a.kind = kMemcpy;
        a.name_id = InternLocked(MemcpyName(m->copyKind));
        g.acts.push_back(a);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = reinterpret_cast<CUpti_ActivityMemset4*>(record);
        Activity a;
        a.start = m->start; a.end = m->end; a.stream = m->streamId;
        a.correlation = m->correlationId; a.kind = kMemset;
        a.name_id = InternLocked("memset");
        g.acts.push_back(a);
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        auto* api = reinterpret_cast<CUpti_ActivityAPI*>(record);
        g.corr_tid[api->correlationId] = api->threadId;
        break;
      }
      default:
        break;
    }
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS) g.dropped += dropped;
  free(buffer);
}

int EnableLocked() {
  if (g.active) return 0;
  if (!CuptiOk(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM), "cuptiSetThreadIdType")) return -1;
  if (!CuptiOk(cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted),
               "cuptiActivityRegisterCallbacks"))
    return -1;
  const CUpti_ActivityKind kinds[] = {
      CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
      CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER};
  for (CUpti_ActivityKind k : kinds) {
    if (!CuptiOk(cuptiActivityEnable(k), "cuptiActivityEnable")) return -1;
  }
  g.active = true;
  return 0;
}

// Assigns every not-yet-assigned record to the open window w (by start time)
// or to "outside" (-1). Called after the flush that follows a full sync.
void AssignLocked(int w) {
  for (size_t i = g.assigned_upto; i < g.acts.size(); ++i) {
    Activity& a = g.acts[i];
    a.window = -1;
    if (w >= 0 && a.start >= g.windows[w].begin && a.start <= g.windows[w].end) a.window = w;
  }
  g.assigned_upto = g.acts.size();
}

uint32_t ThreadOfLocked(const Activity& a) {
  auto it = g.corr_tid.find(a.correlation);
  return it == g.corr_tid.end() ? 0 : it->second;
}

void AppendEscaped(std::string* out, const std::string& s) {
  for (char c : s) {
    if (c == '"' || c == '\\') out->push_back('\\');
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out->push_back(c);
  }
}

}  // namespace

extern "C" {

// Called by the CUDA driver when loaded through CUDA_INJECTION64_PATH.
int InitializeInjection(void) {
  std::lock_guard<std::mutex> lock(g.mu);
  return EnableLocked() == 0 ? 1 : 0;
}

int kprof_init(void) {
  std::lock_guard<std::mutex> lock(g.mu);
  return EnableLocked();
}

int kprof_active(void) { return g.active ? 1 : 0; }

const char* kprof_last_error(void) { return g.error.c_str(); }

uint64_t kprof_gettid(void) { return Tid(); }

int kprof_window_begin(int tag) {
  if (!g.active) { SetError("kprof not active"); return -1; }
  if (!g.windows.empty() && g.windows.back().open) { SetError("window already open"); return -1; }
  // Records from before this window (harness work, escaped work) get "outside".
  if (!CuptiOk(cuptiActivityFlushAll(0), "cuptiActivityFlushAll")) return -1;
  Window w;
  w.tag = tag;
  w.tid = Tid();
  w.open = true;
  if (!CuptiOk(cuptiGetTimestamp(&w.begin), "cuptiGetTimestamp")) return -1;
  std::lock_guard<std::mutex> lock(g.mu);
  AssignLocked(-1);
  g.harness_tids.insert(w.tid);
  g.windows.push_back(w);
  return static_cast<int>(g.windows.size()) - 1;
}

int kprof_window_end(KprofWindowResult* out) {
  if (g.windows.empty() || !g.windows.back().open) { SetError("no open window"); return -1; }
  if (!CuOk(cuCtxSynchronize(), "cuCtxSynchronize")) return -1;
  Window& w = g.windows.back();
  if (!CuptiOk(cuptiGetTimestamp(&w.end), "cuptiGetTimestamp")) return -1;
  w.open = false;
  if (!CuptiOk(cuptiActivityFlushAll(0), "cuptiActivityFlushAll")) return -1;
  std::lock_guard<std::mutex> lock(g.mu);
  const int wi = static_cast<int>(g.windows.size()) - 1;
  const size_t first_new = g.assigned_upto;
  AssignLocked(wi);
  KprofWindowResult r{};
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  std::set<uint32_t> streams;
  for (size_t i = first_new; i < g.acts.size(); ++i) {
    const Activity& a = g.acts[i];
    if (a.window != wi) continue;
    r.sum_us += (a.end - a.start) / 1e3;
    r.activities++;
    if (a.kind == kKernel) r.kernels++;
    streams.insert(a.stream);
    const uint32_t tid = ThreadOfLocked(a);
    if (tid != 0 && tid != w.tid) r.foreign_threads++;
    spans.emplace_back(a.start, a.end);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t busy = 0, cur_s = 0, cur_e = 0;
  bool have = false;
  for (const auto& s : spans) {
    if (!have || s.first > cur_e) {
      if (have) busy += cur_e - cur_s;
      cur_s = s.first; cur_e = s.second; have = true;
    } else {
      cur_e = std::max(cur_e, s.second);
    }
  }
  if (have) busy += cur_e - cur_s;
  r.busy_us = busy / 1e3;
  r.span_us = (w.end - w.begin) / 1e3;
  r.streams = static_cast<int32_t>(streams.size());
  if (out) *out = r;
  return 0;
}

// Report JSON:
// {"windows":N,"timed_windows":T,"dropped_records":D,
//  "harness_thread_ids":[...],
//  "activities":[{"tag","name","kind","stream_id","thread_id","count","total_us"}],  // timed tags
//  "escaped_us":X,"escaped":[...same shape...]}  // outside windows, foreign threads
long kprof_take_report(char* buf, size_t cap) {
  if (g.active) cuptiActivityFlushAll(0);
  std::lock_guard<std::mutex> lock(g.mu);
  AssignLocked(-1);
  using Key = std::tuple<int, uint32_t, uint8_t, uint32_t, uint32_t>;  // tag, name, kind, stream, tid
  std::map<Key, std::pair<int, uint64_t>> timed, escaped;
  uint64_t escaped_ns = 0;
  int timed_windows = 0;
  for (const Window& w : g.windows) timed_windows += (w.tag >= KPROF_TIMED);
  for (const Activity& a : g.acts) {
    const uint32_t tid = ThreadOfLocked(a);
    if (a.window >= 0) {
      const int tag = g.windows[a.window].tag;
      if (tag < KPROF_TIMED) continue;
      auto& v = timed[Key{tag, a.name_id, a.kind, a.stream, tid}];
      v.first++; v.second += a.end - a.start;
    } else if (tid != 0 && !g.harness_tids.count(tid)) {
      auto& v = escaped[Key{-1, a.name_id, a.kind, a.stream, tid}];
      v.first++; v.second += a.end - a.start;
      escaped_ns += a.end - a.start;
    }
  }
  std::string s = "{\"windows\":" + std::to_string(g.windows.size()) +
                  ",\"timed_windows\":" + std::to_string(timed_windows) +
                  ",\"dropped_records\":" + std::to_string(g.dropped) + ",\"harness_thread_ids\":[";
  bool first = true;
  for (uint32_t t : g.harness_tids) { s += (first ? "" : ",") + std::to_string(t); first = false; }
  s += "]";
  auto emit = [&](const char* field, const std::map<Key, std::pair<int, uint64_t>>& m) {
    s += ",\"";
    s += field;
    s += "\":[";
    bool f = true;
    for (const auto& [k, v] : m) {
      if (!f) s += ",";
      f = false;
      s += "{\"tag\":" + std::to_string(std::get<0>(k)) + ",\"name\":\"";
      AppendEscaped(&s, g.names[std::get<1>(k)]);
      s += "\",\"kind\":\"";
      s += KindName(std::get<2>(k));
      s += "\",\"stream_id\":" + std::to_string(std::get<3>(k)) +
           ",\"thread_id\":" + std::to_string(std::get<4>(k)) + ",\"count\":" + std::to_string(v.first);
      char num[64];
      snprintf(num, sizeof(num), ",\"total_us\":%.3f}", v.second / 1e3);
      s += num;
    }
    s += "]";
  };
  emit("activities", timed);
  char num[64];
  snprintf(num, sizeof(num), ",\"escaped_us\":%.3f", escaped_ns / 1e3);
  s += num;
  emit("escaped", escaped);
  s += "}";
  if (s.size() + 1 > cap) return -static_cast<long>(s.size() + 1);
  memcpy(buf, s.c_str(), s.size() + 1);
  g.acts.clear();
  g.corr_tid.clear();
  g.windows.clear();
  g.harness_tids.clear();
  g.assigned_upto = 0;
  g.dropped = 0;
  return static_cast<long>(s.size());
}

int kprof_stream_id(uint64_t cu_stream, int per_thread, uint32_t* out) {
  CUcontext ctx = nullptr;
  if (!CuOk(cuCtxGetCurrent(&ctx), "cuCtxGetCurrent")) return -1;
  if (!CuptiOk(cuptiGetStreamIdEx(ctx, reinterpret_cast<CUstream>(cu_stream), per_thread ? 1 : 0, out),
               "cuptiGetStreamIdEx"))
    return -1;
  return 0;
}

int kprof_reset_persisting_l2(void) {
  return CuOk(cuCtxResetPersistingL2Cache(), "cuCtxResetPersistingL2Cache") ? 0 : -1;
}

}  // extern "C"
