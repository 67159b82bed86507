// kprof: the CUPTI activity recorder that runs inside the trusted harness
// process. Plain C ABI so Python (ctypes) drives it; no gRPC, no torch, so the
// device script builds it with g++ alone (tools/device_profiler.sh).
//
// Loaded either as a CUDA injection library (CUDA_INJECTION64_PATH=libkprof.so:
// the driver calls InitializeInjection() at cuInit, before any user code has
// launched anything) or by dlopen + kprof_init() after CUDA is up. Injection
// is the production path: recording starts before the candidate's module is
// loaded and covers every context, stream and thread of the process.
//
// Contract:
//  * Every kernel, memcpy and memset on every stream/context is recorded with
//    its start/end (CUPTI's GPU clock), stream and the OS thread id (gettid)
//    of the API call that issued it (through the correlation id).
//  * kprof_window_begin/end bracket one timed call. The caller fully
//    synchronizes the device before each (end also synchronizes the current
//    context and flushes CUPTI), so every activity issued in the window has
//    completed and is assigned to it by its start time.
//  * Activities outside every window that were issued by a thread other than
//    the one that opened the windows are "escaped" work (a candidate's
//    background thread) and are reported separately.
//  * Not thread-safe for concurrent window calls: one harness thread drives it.
#ifndef KERNELRL_PROFILER_SERVICE_CUPTI_KPROF_H_
#define KERNELRL_PROFILER_SERVICE_CUPTI_KPROF_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Window tags. Tags >= KPROF_TIMED are timed calls; the report aggregates
// their activity per tag, so interleaved callables (candidate, eager,
// compiled) each get their own activity list from one run.
enum KprofWindowTag {
  KPROF_WARMUP = 0,  // Calls whose results are discarded.
  KPROF_ANCHOR = 1,  // The trusted drift anchor.
  KPROF_TIMED = 2,   // First timed tag; use KPROF_TIMED + i for callable i.
};

// Per-window result, filled by kprof_window_end.
typedef struct {
  double sum_us;        // Sum of activity durations (all streams).
  double busy_us;       // Union of activity intervals.
  double span_us;       // Window length on the CUPTI clock.
  int32_t activities;   // Kernels + memcpys + memsets.
  int32_t kernels;
  int32_t streams;      // Distinct streams with activity.
  int32_t foreign_threads;  // Activities issued by a thread other than the window's.
} KprofWindowResult;

// 0 when CUPTI activity recording is on (enables it on first call).
int kprof_init(void);
// 1 when initialised (injection or kprof_init), else 0.
int kprof_active(void);
// Last error text ("" when none).
const char* kprof_last_error(void);
// Opens a window on the calling thread; returns its index or -1.
int kprof_window_begin(int tag);
// Closes the open window: synchronises the current context, flushes CUPTI and
// fills *out. Returns 0 on success.
int kprof_window_end(KprofWindowResult* out);
// Writes the run report (JSON, see kprof.cc) into buf and clears all state
// (windows, records). Returns the report length, or -(needed length) when cap
// is too small (state is kept then).
long kprof_take_report(char* buf, size_t cap);
// Resets persisting L2 lines to normal (cuCtxResetPersistingL2Cache).
int kprof_reset_persisting_l2(void);
// CUPTI's stream id for a CUstream handle (0 = legacy default stream, 2 =
// per-thread default stream) in the current context, `per_thread` as CUPTI's
// flag for code built with per-thread default streams; lets the harness name
// the streams it issued calls on.
int kprof_stream_id(uint64_t cu_stream, int per_thread, uint32_t* out);
// OS thread id of the caller (for tests and the harness).
uint64_t kprof_gettid(void);

#ifdef __cplusplus
}
#endif

#endif  // KERNELRL_PROFILER_SERVICE_CUPTI_KPROF_H_
