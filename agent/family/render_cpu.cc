// CPU variants of the templates (the sandbox's CPU backend: kernels/*.cc, plain
// C++, g++ -O3 -shared, one thread). Each runs the CUDA template's schedule
// sequentially — blocks, then threads, then a thread's work — with the same
// decomposition, reduction order and precision, so a choice's correctness is
// the same on both devices (fp16 overflows on |x| ~ 1e5 here too, through
// _Float16) while CI needs no GPU. Speed-ups on the CPU say nothing about the
// GPU's.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "agent/family/templates.h"

namespace kernelrl::agent::family {
namespace {

constexpr char kCommon[] = R"cc(#include <float.h>
#include <math.h>

// Half-precision emulation: round a float through _Float16 (|v| > 65504 becomes inf).
static inline float to_half(float v) { return (float)(_Float16)v; }
)cc";

constexpr char kElementwise[] = R"cc(
static inline float chain(float v) {
@BODY@  return v;
}

extern "C" int elementwise_chain(const float* x, float* y, long long n) {
  const long long nvec = n / VEC;
  const long long per_block = (long long)BLOCK * WORK;
  for (long long base = 0; base < nvec; base += per_block) {  // blocks
    for (long long t = 0; t < BLOCK; ++t) {                    // threads
      for (int k = 0; k < WORK; ++k) {
        const long long i = CONTIG ? base + t * WORK + k : base + k * BLOCK + t;
        if (i >= nvec) continue;
        for (int j = 0; j < VEC; ++j) y[i * VEC + j] = chain(x[i * VEC + j]);
      }
    }
  }
  for (long long i = nvec * VEC; i < n; ++i) y[i] = chain(x[i]);
  return 0;
}
)cc";

constexpr char kRowReduce[] = R"cc(
#define GROUP (STRATEGY == 0 ? 1 : STRATEGY == 1 ? 32 : BLOCK)

static inline float acc(float v) { return HALF_ACC ? to_half(v) : v; }

static inline float epilogue(float v) {
@BODY@  return v;
}

// The GROUP lanes' partials combined pairwise, as the shuffles (and the block's
// second round) do on the GPU.
static float group_reduce(float* part, bool is_max) {
  for (int width = GROUP / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) part[l] = is_max ? fmaxf(part[l], part[l + width]) : acc(part[l] + part[l + width]);
  }
  return part[0];
}

// f(lane, column, value) in the order lanes own columns (VEC-wide strips when VEC == 4 and cols % 4 == 0).
template <class F>
static inline void for_row(const float* in, long long cols, F f) {
  const int vec = (VEC == 4 && (cols & 3) == 0) ? 4 : 1;
  for (long long c0 = 0; c0 < cols; c0 += (long long)GROUP * vec) {
    for (int lane = 0; lane < GROUP; ++lane) {
      for (int j = 0; j < vec; ++j) {
        const long long c = c0 + (long long)lane * vec + j;
        if (c < cols) f(lane, c, in[c]);
      }
    }
  }
}

extern "C" int row_op(const float* x, float* y, long long rows, long long cols) {
  static float part[GROUP];
  const float n = (float)cols;
  (void)n;  // Only the norms divide by it.
  for (long long row = 0; row < rows; ++row) {
    const float* in = x + row * cols;
    float* out = y + row * cols;
@ROW@  }
  return 0;
}
)cc";

constexpr char kSoftmaxRow[] = R"cc(    for (int l = 0; l < GROUP; ++l) part[l] = -FLT_MAX;
    for_row(in, cols, [&](int l, long long, float v) { part[l] = fmaxf(part[l], acc(v)); });
    const float m = group_reduce(part, true);
    for (int l = 0; l < GROUP; ++l) part[l] = 0.f;
    for_row(in, cols, [&](int l, long long, float v) { part[l] = acc(part[l] + expf(acc(v) - m)); });
    const float s = group_reduce(part, false);
)cc";

std::string RowBody(const std::string& reduction) {
  if (reduction == "softmax") {
    return absl::StrCat(kSoftmaxRow, "    const float inv = 1.f / s;\n",
                        "    for_row(in, cols, [&](int, long long c, float v) { out[c] = epilogue(expf(v - m) * inv); });\n");
  }
  if (reduction == "log_softmax") {
    return absl::StrCat(kSoftmaxRow, "    const float lse = m + logf(s);\n",
                        "    for_row(in, cols, [&](int, long long c, float v) { out[c] = epilogue(v - lse); });\n");
  }
  if (reduction == "layernorm") {
    return R"cc(    for (int l = 0; l < GROUP; ++l) part[l] = 0.f;
    for_row(in, cols, [&](int l, long long, float v) { part[l] = acc(part[l] + v); });
    const float mean = group_reduce(part, false) / n;
    for (int l = 0; l < GROUP; ++l) part[l] = 0.f;
    for_row(in, cols, [&](int l, long long, float v) { const float d = acc(v - mean); part[l] = acc(part[l] + d * d); });
    const float rstd = 1.f / sqrtf(group_reduce(part, false) / n + 1e-5f);
    for_row(in, cols, [&](int, long long c, float v) { out[c] = epilogue((v - mean) * rstd); });
)cc";
  }
  return R"cc(    for (int l = 0; l < GROUP; ++l) part[l] = 0.f;
    for_row(in, cols, [&](int l, long long, float v) { const float a = acc(v); part[l] = acc(part[l] + a * a); });
    const float r = 1.f / sqrtf(group_reduce(part, false) / n + 1e-6f);
    for_row(in, cols, [&](int, long long c, float v) { out[c] = epilogue(v * r); });
)cc";
}

constexpr char kGemm[] = R"cc(
static inline float act(float v) {
@BODY@  return v;
}

#if HALF
typedef _Float16 S;  // tiles and accumulators in half precision
#else
typedef float S;
#endif

static void epilogue_pass(float* y, const float* bias, long long rows, long long cols, int add_bias) {
  for (long long i = 0; i < rows * cols; ++i) y[i] = act(y[i] + (add_bias ? bias[i % cols] : 0.f));
}

extern "C" int gemm_epilogue(const float* x, const float* w, const float* bias, float* y, long long M, long long K, long long N) {
#if GEMM == 0
  // The library GEMM's role: a plain row-times-row product (fp16: inputs rounded to half, fp32 sums).
  for (long long m = 0; m < M; ++m) {
    for (long long n = 0; n < N; ++n) {
      float s = FUSED ? bias[n] : 0.f;
      for (long long k = 0; k < K; ++k) {
        s += HALF ? to_half(x[m * K + k]) * to_half(w[n * K + k]) : x[m * K + k] * w[n * K + k];
      }
      y[m * N + n] = s;
    }
  }
  if (!FUSED || HAS_ACT) epilogue_pass(y, bias, M, N, FUSED ? 0 : 1);
#else
  const long long TILE = GEMM == 1 ? 16 : 32;
  for (long long m0 = 0; m0 < M; m0 += TILE) {
    for (long long n0 = 0; n0 < N; n0 += TILE) {
      for (long long m = m0; m < m0 + TILE && m < M; ++m) {
        for (long long n = n0; n < n0 + TILE && n < N; ++n) {
          S s = (S)0.f;
          for (long long k = 0; k < K; ++k) s = (S)(s + (S)x[m * K + k] * (S)w[n * K + k]);
          float v = (float)s;
          if (FUSED) v = act(v + bias[n]);
          y[m * N + n] = v;
        }
      }
    }
  }
  if (!FUSED) epilogue_pass(y, bias, M, N, 1);
#endif
  return 0;
}
)cc";

std::string Header(const TaskSpec& spec, const Choice& choice) {
  auto slots = Slots(spec.family);
  return absl::StrCat("// kernelrl family template (CPU): ", DescribeTask(spec), "; choice ", ChoiceDigits(choice), ": ",
                      DescribeChoice(*slots, choice), "\n");
}

std::string Fill(const char* tmpl, const std::string& body, const std::string& row = "") {
  return absl::StrReplaceAll(tmpl, {{"@BODY@", body}, {"@ROW@", row}});
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> RenderCpu(const TaskSpec& spec, const Choice& choice) {
  const bool half = choice[3] == 1;
  if (spec.family == "elementwise") {
    static constexpr int kVec[] = {1, 2, 4}, kBlock[] = {64, 256, 1024};
    const std::string defines = absl::StrCat("#define VEC ", kVec[choice[0]], "\n#define BLOCK ", kBlock[choice[1]],
                                             "\n#define WORK ", choice[2] == 0 ? 1 : 4, "\n#define CONTIG ",
                                             choice[2] == 2 ? 1 : 0, "\n");
    const std::string body =
        absl::StrCat(half ? "  v = to_half(v);\n" : "", PointwiseBody(spec.ops, half ? "to_half" : "", "  "));
    return std::map<std::string, std::string>{
        {"kernels/elementwise.cc", absl::StrCat(Header(spec, choice), defines, kCommon, Fill(kElementwise, body))},
        {"model_new.py", ModelNewSource(spec)}};
  }
  if (spec.family == "rowreduce") {
    static constexpr int kBlock[] = {64, 256, 1024}, kVec[] = {1, 4};
    const std::string defines = absl::StrCat("#define STRATEGY ", choice[0], "\n#define BLOCK ", kBlock[choice[1]],
                                             "\n#define VEC ", kVec[choice[2]], "\n#define HALF_ACC ", half ? 1 : 0, "\n");
    const std::string body = PointwiseBody(std::vector<std::string>(spec.ops.begin() + 1, spec.ops.end()), "", "  ");
    return std::map<std::string, std::string>{
        {"kernels/rowreduce.cc",
         absl::StrCat(Header(spec, choice), defines, kCommon, Fill(kRowReduce, body, RowBody(spec.ops[0])))},
        {"model_new.py", ModelNewSource(spec)}};
  }
  const std::string defines = absl::StrCat("#define GEMM ", choice[0], "\n#define FUSED ", choice[1], "\n#define HALF ",
                                           half ? 1 : 0, "\n#define HAS_ACT ", spec.ops.empty() ? 0 : 1, "\n");
  return std::map<std::string, std::string>{
      {"kernels/gemm_epilogue.cc",
       absl::StrCat(Header(spec, choice), defines, kCommon, Fill(kGemm, PointwiseBody(spec.ops, "", "  ")))},
      {"model_new.py", ModelNewSource(spec)}};
}

}  // namespace kernelrl::agent::family
