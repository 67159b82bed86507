// The trusted harness's CUDA helpers (sandbox/harness/verify_cuda.py loads
// this library with ctypes in the reference and candidate processes; never
// in the zygote, which must not initialise CUDA):
//
//   krv_digest     exact digest of a tensor's bytes, the one inputs.fingerprint
//                  computes with torch ops, in one pass instead of three;
//   krv_compare    tolerance check of a candidate output against the reference
//                  output in one pass (counts and first bad index);
//   krv_check      the same check and the precision check's sums in one pass,
//                  launched without waiting (a block's outputs, one sync);
//   krv_exchange_* the input exchange: device memory the reference process
//                  allocates, exports as a file descriptor and the candidate
//                  process maps to read its inputs from (and, as a fallback,
//                  write outputs into), so multi-GB tensors never travel
//                  through host memory;
//   krv_ipc_*      the outputs: the candidate process exports the segment
//                  an output lies in, the reference maps it and copies the
//                  output itself;
//   krv_table*     one launch over a table of chunks: compare, poison, and
//                  the keyed digest that ends a block's clock (the seal) and
//                  copies the outputs into the snapshot after it.
//
// Why kernels of our own: a fresh process pays for every torch kernel it uses
// the first time (lazy module loading, ~2-20 ms each), and the torch digest
// needed three passes plus int64 temporaries per chunk; both showed up as
// most of the verify wall on the H100 (docs/SANDBOX.md, run 12).
//
// Every entry point returns 0 or a CUDA error code (cudaError_t or CUresult,
// by name in krv_error_string), and synchronises before it returns, except the
// table launches (krv_table, krv_table_digest), which a clock may contain, and
// the batched check (krv_check, krv_sum_squares).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace {

constexpr int kThreads = 256;
constexpr long long kTile = 1 << 16;          // units per block iteration
constexpr long long kChunk = 1 << 26;         // inputs.fingerprint's chunk
constexpr unsigned kModulus = 65521;          // position weights (i mod 65521) + 1

__device__ unsigned long long Widen(uint8_t v) { return v; }
__device__ unsigned long long Widen(int16_t v) { return static_cast<unsigned long long>(static_cast<long long>(v)); }
__device__ unsigned long long Widen(int32_t v) { return static_cast<unsigned long long>(static_cast<long long>(v)); }
__device__ unsigned long long Widen(int64_t v) { return static_cast<unsigned long long>(v); }

__device__ unsigned long long WarpSum(unsigned long long v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

// plain = sum of the units' bit patterns (sign-extended), weighted = sum of
// unit * (chunk index + 1) * ((index in chunk mod 65521) + 1), both mod 2^64:
// exactly what inputs.fingerprint's torch ops compute. A tile never straddles
// a chunk (2^26 is a multiple of 2^16), so the chunk factor is applied once.
template <typename T>
__global__ void DigestKernel(const T* __restrict__ data, long long n, unsigned long long* out) {
  unsigned long long plain = 0, weighted = 0;
  for (long long start = blockIdx.x * kTile; start < n; start += static_cast<long long>(gridDim.x) * kTile) {
    const long long end = start + kTile < n ? start + kTile : n;
    const unsigned long long chunk_factor = static_cast<unsigned long long>(start / kChunk) + 1;
    unsigned in_chunk = static_cast<unsigned>((start % kChunk) + threadIdx.x);
    unsigned r = in_chunk % kModulus;
    unsigned long long tile = 0;
    for (long long i = start + threadIdx.x; i < end; i += kThreads) {
      const unsigned long long v = Widen(data[i]);
      plain += v;
      tile += v * (r + 1);
      r += kThreads;
      if (r >= kModulus) r -= kModulus;
    }
    weighted += tile * chunk_factor;
  }
  __shared__ unsigned long long sp[kThreads / 32], sw[kThreads / 32];
  plain = WarpSum(plain);
  weighted = WarpSum(weighted);
  if (threadIdx.x % 32 == 0) {
    sp[threadIdx.x / 32] = plain;
    sw[threadIdx.x / 32] = weighted;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    plain = threadIdx.x < kThreads / 32 ? sp[threadIdx.x] : 0;
    weighted = threadIdx.x < kThreads / 32 ? sw[threadIdx.x] : 0;
    plain = WarpSum(plain);
    weighted = WarpSum(weighted);
    if (threadIdx.x == 0) {
      atomicAdd(&out[0], plain);
      atomicAdd(&out[1], weighted);
    }
  }
}

template <typename T>
__device__ double ToDouble(T v) { return static_cast<double>(v); }
template <>
__device__ double ToDouble(__half v) { return static_cast<double>(__half2float(v)); }
template <>
__device__ double ToDouble(__nv_bfloat16 v) { return static_cast<double>(__bfloat162float(v)); }

__device__ double WarpSumDouble(double v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

// One output against its references in one pass: out[0] counts elements of
// `got` not close to `lo` (torch.isclose(got, lo, rtol, atol,
// equal_nan=True) semantics, evaluated in double), out[1] of those the NaNs
// where `lo` is not NaN, out[2] and out[3] the first index of each (n when
// none; the caller sets both to n before the launch). With `rms_sum` (device:
// the sum of lo's finite squares, SumSquaresKernel) atol is scaled by
// max(1, its root mean square). out[4..6], as doubles, are the sums the
// precision check's norms need (precision.py): sum (got - ref)^2 and
// sum (lo - ref)^2 over pairs whose members are both finite, and sum ref^2
// over finite ref, where ref is `hi` (float64) when given, else `lo` (out[6]
// is then 0).
template <typename T>
__global__ void CheckKernel(const T* __restrict__ got, const T* __restrict__ lo, const double* __restrict__ hi,
                            long long n, double atol, double rtol, const double* rms_sum,
                            unsigned long long* out) {
  if (rms_sum != nullptr) {
    const double rms = sqrt(*rms_sum / static_cast<double>(n));
    if (rms > 1.0) atol *= rms;
  }
  unsigned long long bad = 0, new_nan = 0;
  long long first_bad = n, first_nan = n;
  double err2 = 0, ref2 = 0, own2 = 0;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const double g = ToDouble(got[i]), l = ToDouble(lo[i]);
    const bool g_nan = isnan(g), l_nan = isnan(l);
    bool close = (g == l) || (g_nan && l_nan);
    if (!close) {
      const double diff = fabs(g - l);
      close = isfinite(diff) && diff <= atol + fabs(rtol * l);
    }
    if (!close) {
      ++bad;
      if (i < first_bad) first_bad = i;
      if (g_nan && !l_nan) {
        ++new_nan;
        if (i < first_nan) first_nan = i;
      }
    }
    const double r = hi != nullptr ? hi[i] : l;
    if (isfinite(r)) {
      ref2 += r * r;
      if (isfinite(g)) err2 += (g - r) * (g - r);
      if (hi != nullptr && isfinite(l)) own2 += (l - r) * (l - r);
    }
  }
  bad = WarpSum(bad);
  new_nan = WarpSum(new_nan);
  err2 = WarpSumDouble(err2);
  ref2 = WarpSumDouble(ref2);
  own2 = WarpSumDouble(own2);
  for (int off = 16; off > 0; off >>= 1) {
    first_bad = min(first_bad, __shfl_down_sync(0xffffffffu, first_bad, off));
    first_nan = min(first_nan, __shfl_down_sync(0xffffffffu, first_nan, off));
  }
  if (threadIdx.x % 32 != 0) return;
  if (bad) {
    atomicAdd(&out[0], bad);
    atomicMin(&out[2], static_cast<unsigned long long>(first_bad));
  }
  if (new_nan) {
    atomicAdd(&out[1], new_nan);
    atomicMin(&out[3], static_cast<unsigned long long>(first_nan));
  }
  double* sums = reinterpret_cast<double*>(out + 4);
  if (err2 != 0) atomicAdd(&sums[0], err2);
  if (ref2 != 0) atomicAdd(&sums[1], ref2);
  if (own2 != 0) atomicAdd(&sums[2], own2);
}

// *out += the sum of x's finite squares (the scaled tolerance's root mean square).
template <typename T>
__global__ void SumSquaresKernel(const T* __restrict__ x, long long n, double* out) {
  double s = 0;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const double v = ToDouble(x[i]);
    if (isfinite(v)) s += v * v;
  }
  s = WarpSumDouble(s);
  if (threadIdx.x % 32 == 0 && s != 0) atomicAdd(out, s);
}

// Exact comparison (integer, bool and other dtypes) unit by unit.
template <typename T>
__global__ void EqualKernel(const T* __restrict__ got, const T* __restrict__ ref, long long n,
                            unsigned long long* counts) {
  unsigned long long bad = 0;
  long long first_bad = n;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    if (got[i] != ref[i]) {
      ++bad;
      if (i < first_bad) first_bad = i;
    }
  }
  if (bad) {
    atomicAdd(&counts[0], bad);
    atomicMin(&counts[2], static_cast<unsigned long long>(first_bad));
  }
}

int Blocks(long long n, long long per_block) {
  long long b = (n + per_block - 1) / per_block;
  if (b < 1) b = 1;
  return static_cast<int>(b < 132 * 16 ? b : 132 * 16);
}

// Device scratch for the reductions' results, made once per process.
unsigned long long* Scratch() {
  static unsigned long long* p = nullptr;
  if (p == nullptr && cudaMalloc(&p, 8 * sizeof(unsigned long long)) != cudaSuccess) p = nullptr;
  return p;
}

template <typename T>
int Digest(const void* data, long long n, unsigned long long* out) {
  unsigned long long* d = Scratch();
  if (d == nullptr) return cudaErrorMemoryAllocation;
  cudaError_t e = cudaMemset(d, 0, 2 * sizeof(unsigned long long));
  if (e != cudaSuccess) return e;
  if (n > 0) DigestKernel<T><<<Blocks(n, kTile), kThreads>>>(static_cast<const T*>(data), n, d);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  return cudaMemcpy(out, d, 2 * sizeof(unsigned long long), cudaMemcpyDeviceToHost);
}

template <typename Launch>
int Counted(long long n, unsigned long long* out, Launch launch) {
  unsigned long long* d = Scratch();
  if (d == nullptr) return cudaErrorMemoryAllocation;
  const unsigned long long init[8] = {0, 0, static_cast<unsigned long long>(n), static_cast<unsigned long long>(n)};
  cudaError_t e = cudaMemcpy(d, init, sizeof(init), cudaMemcpyHostToDevice);
  if (e != cudaSuccess) return e;
  if (n > 0) launch(d);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  return cudaMemcpy(out, d, 4 * sizeof(unsigned long long), cudaMemcpyDeviceToHost);
}

int Driver(CUresult r) { return r == CUDA_SUCCESS ? 0 : 10000 + static_cast<int>(r); }

CUmemAllocationProp ExchangeProp(int device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

// Reserves an address range and maps `handle` there read-write for `device`.
int MapHandle(CUmemGenericAllocationHandle handle, unsigned long long bytes, int device,
              unsigned long long* ptr) {
  CUdeviceptr p = 0;
  int rc = Driver(cuMemAddressReserve(&p, bytes, 0, 0, 0));
  if (rc != 0) return rc;
  if ((rc = Driver(cuMemMap(p, bytes, 0, handle, 0))) != 0) {
    cuMemAddressFree(p, bytes);
    return rc;
  }
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if ((rc = Driver(cuMemSetAccess(p, bytes, &access, 1))) != 0) {
    cuMemUnmap(p, bytes);
    cuMemAddressFree(p, bytes);
    return rc;
  }
  *ptr = p;
  return 0;
}

int CurrentDevice(int* device) {
  // A runtime call makes the primary context (torch's) current on this thread.
  cudaError_t e = cudaGetDevice(device);
  if (e == cudaSuccess) e = cudaFree(nullptr);
  return e;
}

// The keyed digest's mixing: splitmix64's finaliser (full avalanche).
__host__ __device__ __forceinline__ unsigned long long Mix(unsigned long long x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

constexpr unsigned long long kPositionStep = 0x9e3779b97f4a7c15ULL;

// One launch over a table of n chunks, each (a, b, bytes) as three u64:
//   mode 1  count bytes where a != b        (outputs changed since the snapshot)
//   mode 2  fill a with `value`             (poison)
//   mode 3  count bytes of a != `value`     (poison still intact)
//   mode 4  keyed digest of a               (the seal that ends a block's clock)
//   mode 5  copy a -> b and digest a        (the snapshot, after the clock)
// Asynchronous on the legacy default stream (torch's, in the reference);
// counts and digests are added to *count (device memory). Chunks are small
// (wire.py splits outputs), so every SM has work whatever the outputs' sizes.
//
// The digest is the sum, mod 2^64, of Mix(word ^ a key-derived secret of its
// destination address) over 16-byte words (single bytes where a chunk is not
// 16-byte aligned), so it does not depend on the launch's order. The seal
// reads the outputs once where they lie (a copy reads and writes); the copy
// into the snapshot then runs after the clock under the same digest, and a
// difference means the outputs changed in between (work deferred past
// "done"). The key is drawn by the reference per block and never leaves its
// process: without it a candidate cannot choose unfinished outputs whose
// digest equals the finished ones'.
__global__ void TableKernel(int mode, const unsigned long long* table, long long n, int value,
                            unsigned long long key, unsigned long long key_high, unsigned long long* count) {
  unsigned long long mine = 0;
  for (long long c = blockIdx.x; c < n; c += gridDim.x) {
    uint8_t* a = reinterpret_cast<uint8_t*>(table[3 * c]);
    uint8_t* b = reinterpret_cast<uint8_t*>(table[3 * c + 1]);
    const unsigned long long bytes = table[3 * c + 2];
    const unsigned long long at = table[3 * c + 1];  // digest positions are destination addresses
    const bool b_used = mode == 1 || mode == 5;
    const bool vec = reinterpret_cast<uintptr_t>(a) % 16 == 0 && (!b_used || reinterpret_cast<uintptr_t>(b) % 16 == 0);
    const unsigned long long words = vec ? bytes / 16 : 0;
    const uint4 fill = make_uint4(0x01010101u * (value & 0xFF), 0x01010101u * (value & 0xFF),
                                  0x01010101u * (value & 0xFF), 0x01010101u * (value & 0xFF));
    for (unsigned long long i = threadIdx.x; i < words; i += blockDim.x) {
      uint4* wa = reinterpret_cast<uint4*>(a) + i;
      if (mode == 1) {
        const uint4 x = *wa, y = reinterpret_cast<const uint4*>(b)[i];
        mine += (x.x != y.x) + (x.y != y.y) + (x.z != y.z) + (x.w != y.w);
      } else if (mode == 2) {
        *wa = fill;
      } else if (mode == 3) {
        const uint4 x = *wa;
        mine += (x.x != fill.x) + (x.y != fill.y) + (x.z != fill.z) + (x.w != fill.w);
      } else {
        const uint4 x = *wa;
        if (mode == 5) reinterpret_cast<uint4*>(b)[i] = x;
        const unsigned long long secret = (at + 16 * i) * kPositionStep;
        const unsigned long long lo = x.x | (static_cast<unsigned long long>(x.y) << 32);
        const unsigned long long hi = x.z | (static_cast<unsigned long long>(x.w) << 32);
        mine += Mix(lo ^ key ^ secret) + Mix(hi ^ key_high ^ secret);
      }
    }
    for (unsigned long long i = words * 16 + threadIdx.x; i < bytes; i += blockDim.x) {
      if (mode == 1) mine += a[i] != b[i];
      else if (mode == 2) a[i] = static_cast<uint8_t>(value);
      else if (mode == 3) mine += a[i] != static_cast<uint8_t>(value);
      else {
        const uint8_t v = a[i];
        if (mode == 5) b[i] = v;
        mine += Mix(v ^ key_high ^ key ^ ((at + i) * kPositionStep));
      }
    }
  }
  if (mode != 2) {
    mine = WarpSum(mine);
    if (threadIdx.x % 32 == 0 && mine) atomicAdd(count, mine);
  }
}

int LaunchTable(int mode, unsigned long long table, long long n, int value, unsigned long long key,
                unsigned long long count) {
  if (n <= 0) return 0;
  const int blocks = n < 132LL * 16 ? static_cast<int>(n) : 132 * 16;
  TableKernel<<<blocks, kThreads>>>(mode, reinterpret_cast<const unsigned long long*>(table), n, value, key,
                                    Mix(key ^ 0x5bd1e9955bd1e995ULL), reinterpret_cast<unsigned long long*>(count));
  return cudaGetLastError();
}

}  // namespace

extern "C" {

// unit_size 1 (unsigned), 2, 4 or 8 (signed); n units.
int krv_digest(const void* data, long long n, int unit_size, unsigned long long* out) {
  switch (unit_size) {
    case 1: return Digest<uint8_t>(data, n, out);
    case 2: return Digest<int16_t>(data, n, out);
    case 4: return Digest<int32_t>(data, n, out);
    case 8: return Digest<int64_t>(data, n, out);
    default: return cudaErrorInvalidValue;
  }
}

// kind: 0 float32, 1 float64, 2 float16, 3 bfloat16 (tolerance);
// 11, 12, 14, 18: exact, units of 1, 2, 4 or 8 bytes. out[4] as CheckKernel's first four.
int krv_compare(const void* got, const void* ref, long long n, int kind, double atol, double rtol,
                unsigned long long* out) {
  const int blocks = Blocks(n, kThreads * 8LL);
  switch (kind) {
#define KRV_TOL(code, T)                                                                                   \
  case code:                                                                                             \
    return Counted(n, out, [&](unsigned long long* d) {                                                  \
      CheckKernel<T><<<blocks, kThreads>>>(static_cast<const T*>(got), static_cast<const T*>(ref), nullptr, n, \
                                           atol, rtol, nullptr, d);                                        \
    });
#define KRV_EQ(code, T)                                                                                   \
  case code:                                                                                            \
    return Counted(n, out, [&](unsigned long long* d) {                                                 \
      EqualKernel<T><<<blocks, kThreads>>>(static_cast<const T*>(got), static_cast<const T*>(ref), n, d); \
    });
    KRV_TOL(0, float)
    KRV_TOL(1, double)
    KRV_TOL(2, __half)
    KRV_TOL(3, __nv_bfloat16)
    KRV_EQ(11, uint8_t)
    KRV_EQ(12, uint16_t)
    KRV_EQ(14, uint32_t)
    KRV_EQ(18, unsigned long long)
#undef KRV_TOL
#undef KRV_EQ
    default: return cudaErrorInvalidValue;
  }
}

// The batched check of a block's outputs (reference.Driver.check): launches
// CheckKernel into out[8] (device memory; out[2] and out[3] set to n, the rest
// to 0, by the caller) without waiting, so one synchronisation reads every
// output's counts and sums. kind: 0 float32, 1 float64, 2 float16,
// 3 bfloat16; hi (float64) and rms_sum may be 0.
int krv_check(const void* got, const void* lo, const void* hi, long long n, int kind, double atol, double rtol,
              const void* rms_sum, unsigned long long out) {
  if (out == 0) return cudaErrorInvalidValue;
  if (n <= 0) return 0;
  const int blocks = Blocks(n, kThreads * 8LL);
  const double* h = static_cast<const double*>(hi);
  const double* r = static_cast<const double*>(rms_sum);
  unsigned long long* o = reinterpret_cast<unsigned long long*>(out);
  switch (kind) {
#define KRV_CHECK(code, T)                                                                                 \
  case code:                                                                                             \
    CheckKernel<T><<<blocks, kThreads>>>(static_cast<const T*>(got), static_cast<const T*>(lo), h, n, atol, \
                                         rtol, r, o);                                                    \
    return cudaGetLastError();
    KRV_CHECK(0, float)
    KRV_CHECK(1, double)
    KRV_CHECK(2, __half)
    KRV_CHECK(3, __nv_bfloat16)
#undef KRV_CHECK
    default: return cudaErrorInvalidValue;
  }
}

// *out (device, float64) += the sum of x's finite squares; no waiting.
int krv_sum_squares(const void* x, long long n, int kind, unsigned long long out) {
  if (out == 0) return cudaErrorInvalidValue;
  if (n <= 0) return 0;
  const int blocks = Blocks(n, kThreads * 8LL);
  double* o = reinterpret_cast<double*>(out);
  switch (kind) {
    case 0: SumSquaresKernel<float><<<blocks, kThreads>>>(static_cast<const float*>(x), n, o); break;
    case 1: SumSquaresKernel<double><<<blocks, kThreads>>>(static_cast<const double*>(x), n, o); break;
    case 2: SumSquaresKernel<__half><<<blocks, kThreads>>>(static_cast<const __half*>(x), n, o); break;
    case 3: SumSquaresKernel<__nv_bfloat16><<<blocks, kThreads>>>(static_cast<const __nv_bfloat16*>(x), n, o); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

// Fills bytes at ptr with `value` (the reference poisons exchange slots: 0xFF
// is NaN in every floating dtype, -1 in every integer one).
int krv_fill(unsigned long long ptr, unsigned long long bytes, int value) {
  cudaError_t e = cudaMemset(reinterpret_cast<void*>(ptr), value, bytes);
  return e != cudaSuccess ? e : cudaDeviceSynchronize();
}

// Candidate side: the CUDA IPC handle of the allocation holding `ptr` (torch's
// caching allocator hands out pieces of cudaMalloc segments), its base and
// size, so that the reference process maps the segment and reads an output
// where the forward left it (sandbox/harness/wire.py). Fails for memory that
// legacy IPC cannot export (VMM or pool allocations, host memory).
int krv_ipc_export(unsigned long long ptr, unsigned char* handle, unsigned long long* base,
                   unsigned long long* size) {
  CUdeviceptr b = 0;
  size_t n = 0;
  int rc = Driver(cuMemGetAddressRange(&b, &n, static_cast<CUdeviceptr>(ptr)));
  if (rc != 0) return rc;
  CUipcMemHandle h;
  if ((rc = Driver(cuIpcGetMemHandle(&h, b))) != 0) return rc;
  memcpy(handle, h.reserved, CU_IPC_HANDLE_SIZE);
  *base = b;
  *size = n;
  return 0;
}

// Reference side: maps an exported segment; *size is what the mapping spans.
int krv_ipc_open(const unsigned char* handle, unsigned long long* ptr, unsigned long long* size) {
  int device = 0;
  int rc = CurrentDevice(&device);
  if (rc != 0) return rc;
  CUipcMemHandle h;
  memcpy(h.reserved, handle, CU_IPC_HANDLE_SIZE);
  CUdeviceptr p = 0;
  if ((rc = Driver(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))) != 0) return rc;
  CUdeviceptr b = 0;
  size_t n = 0;
  if ((rc = Driver(cuMemGetAddressRange(&b, &n, p))) != 0 || b != p) {
    cuIpcCloseMemHandle(p);
    return rc != 0 ? rc : cudaErrorInvalidValue;
  }
  *ptr = p;
  *size = n;
  return 0;
}

// The driver's id of the allocation holding `ptr`: unique per allocation, so
// an exported segment freed and allocated again at the same address is told apart.
int krv_buffer_id(unsigned long long ptr, unsigned long long* id) {
  return Driver(cuPointerGetAttribute(id, CU_POINTER_ATTRIBUTE_BUFFER_ID, static_cast<CUdeviceptr>(ptr)));
}

int krv_ipc_close(unsigned long long ptr) { return Driver(cuIpcCloseMemHandle(static_cast<CUdeviceptr>(ptr))); }

// Modes 1-3 of TableKernel; *count (device) gets the counts of modes 1 and 3.
int krv_table(int mode, unsigned long long table, long long n, int value, unsigned long long count) {
  if (mode < 1 || mode > 3 || (mode != 2 && count == 0)) return cudaErrorInvalidValue;
  return LaunchTable(mode, table, n, value, 0, count);
}

// The keyed digest of a table's source bytes (copy = 0, the seal) or their
// copy to the destinations with the same digest (copy = 1, the snapshot),
// added to *digest (device memory, zeroed by the caller); asynchronous.
int krv_table_digest(int copy, unsigned long long table, long long n, unsigned long long key,
                     unsigned long long digest) {
  if (digest == 0 || (copy != 0 && copy != 1)) return cudaErrorInvalidValue;
  return LaunchTable(copy == 1 ? 5 : 4, table, n, 0, key, digest);
}

int krv_copy(unsigned long long dst, unsigned long long src, unsigned long long bytes) {
  return cudaMemcpy(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes,
                    cudaMemcpyDeviceToDevice);
}

// Reference side: a new exportable allocation of at least `bytes`, mapped
// here; *mapped_bytes is the size rounded to the allocation granularity.
int krv_exchange_create(unsigned long long bytes, int* fd, unsigned long long* ptr,
                        unsigned long long* mapped_bytes) {
  int device = 0;
  int rc = CurrentDevice(&device);
  if (rc != 0) return rc;
  CUmemAllocationProp prop = ExchangeProp(device);
  size_t gran = 0;
  if ((rc = Driver(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM))) != 0) return rc;
  const unsigned long long size = (bytes + gran - 1) / gran * gran;
  CUmemGenericAllocationHandle handle;
  if ((rc = Driver(cuMemCreate(&handle, size, &prop, 0))) != 0) return rc;
  int shared_fd = -1;
  rc = Driver(cuMemExportToShareableHandle(&shared_fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  if (rc == 0) rc = MapHandle(handle, size, device, ptr);
  cuMemRelease(handle);  // the mapping (and the fd's importers) keep the memory alive
  if (rc != 0) return rc;
  *fd = shared_fd;
  *mapped_bytes = size;
  return 0;
}

// Candidate side: maps the reference's exchange allocation from its fd.
int krv_exchange_import(int fd, unsigned long long bytes, unsigned long long* ptr) {
  int device = 0;
  int rc = CurrentDevice(&device);
  if (rc != 0) return rc;
  CUmemGenericAllocationHandle handle;
  rc = Driver(cuMemImportFromShareableHandle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  if (rc != 0) return rc;
  rc = MapHandle(handle, bytes, device, ptr);
  cuMemRelease(handle);
  return rc;
}

int krv_exchange_release(unsigned long long ptr, unsigned long long bytes) {
  cudaDeviceSynchronize();
  int rc = Driver(cuMemUnmap(ptr, bytes));
  const int rc2 = Driver(cuMemAddressFree(ptr, bytes));
  return rc != 0 ? rc : rc2;
}

const char* krv_error_string(int code) {
  if (code >= 10000) {
    const char* s = nullptr;
    return cuGetErrorString(static_cast<CUresult>(code - 10000), &s) == CUDA_SUCCESS && s ? s : "unknown CUresult";
  }
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}

}  // extern "C"
