#include "data/shapes.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace kernelrl {
namespace {

constexpr double kF32 = 4;

const std::set<std::string>& Rules() {
  static const std::set<std::string> rules = {
      "elementwise", "noise",     "dimwise",       "reduce",        "argreduce",  "linear",
      "matmul2",     "bmm2",      "binary2",       "sdpa",          "mha",        "conv",
      "conv_transpose", "pool",   "adaptive_pool", "channel_norm",  "group_norm", "last_dim_norm",
      "flatten",     "transpose", "glu",           "pixel_shuffle", "upsample",   "scale_param"};
  return rules;
}

int64_t Rank(const Shape& s) { return static_cast<int64_t>(s.size()); }

// Spatial dims of an (N, C, *spatial) shape.
Shape Spatial(const Shape& s) { return Shape(s.begin() + 2, s.end()); }

int64_t Product(const Shape& s) {
  int64_t p = 1;
  for (int64_t d : s) p *= d;
  return p;
}

bool ChannelShape(const OpSpec& spec, const Shape& in) { return Rank(in) == 2 + spec.spatial() && in[1] >= 1; }

// The call text of a plain function over x: symbol(x, args...).
std::string FunctionCall(const OpSpec& spec, const std::vector<std::string>& args) {
  std::vector<std::string> all = {"x"};
  for (const auto& a : args)
    if (!a.empty()) all.push_back(a);
  return absl::StrCat(spec.symbol(), "(", absl::StrJoin(all, ", "), ")");
}

std::string Joined(const std::vector<std::string>& args) {
  std::vector<std::string> kept;
  for (const auto& a : args)
    if (!a.empty()) kept.push_back(a);
  return absl::StrJoin(kept, ", ");
}

// Module (constructor in __init__, call "{m}(x)") or function call, same arguments.
void ModuleOrCall(const OpSpec& spec, const std::vector<std::string>& args, OpStep* step) {
  if (spec.module()) {
    step->init = absl::StrCat(spec.symbol(), "(", Joined(args), ")");
    step->call = "{m}(x)";
  } else {
    step->call = FunctionCall(spec, args);
  }
}

std::vector<int64_t> DivisorsIn(int64_t n, const std::vector<int64_t>& candidates) {
  std::vector<int64_t> out;
  for (int64_t c : candidates)
    if (c <= n && n % c == 0) out.push_back(c);
  return out;
}

std::vector<int64_t> ReducibleDims(const Shape& in) {
  std::vector<int64_t> dims;
  for (int64_t d = 1; d < Rank(in); ++d)
    if (in[d] >= 2) dims.push_back(d);
  return dims;
}

int64_t ConvOut(int64_t len, int64_t k, int64_t s, int64_t p) { return (len + 2 * p - k) / s + 1; }
int64_t ConvTransposeOut(int64_t len, int64_t k, int64_t s, int64_t p) { return (len - 1) * s - 2 * p + k; }

// Kernel sizes a conv may draw for these spatial dims (every dim >= k).
std::vector<int64_t> ConvKernels(const OpSpec& spec, const Shape& in) {
  const std::vector<int64_t> all = spec.spatial() == 3 ? std::vector<int64_t>{1, 3} : std::vector<int64_t>{1, 3, 5};
  std::vector<int64_t> ok;
  for (int64_t k : all) {
    bool fits = true;
    for (int64_t d : Spatial(in)) fits = fits && d >= k;
    if (fits) ok.push_back(k);
  }
  return ok;
}

}  // namespace

std::string ShapeText(const Shape& s) { return absl::StrCat("[", absl::StrJoin(s, ", "), "]"); }
int64_t NumElements(const Shape& s) { return Product(s); }
bool IsKnownRule(const std::string& rule) { return Rules().count(rule) > 0; }

absl::StatusOr<std::string> FillTemplate(const std::string& text, Rng* rng) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] != '{') {
      out += text[i++];
      continue;
    }
    const size_t end = text.find('}', i);
    if (end == std::string::npos) return absl::InvalidArgumentError(absl::StrCat("unclosed { in '", text, "'"));
    const std::string body = text.substr(i + 1, end - i - 1);
    i = end + 1;
    if (body.size() < 2 || body[1] != ':')
      return absl::InvalidArgumentError(absl::StrCat("bad placeholder {", body, "} in '", text, "'"));
    const std::string spec = body.substr(2);
    if (body[0] == 'c') {
      const std::vector<std::string> choices = absl::StrSplit(spec, '|');
      out += rng->Pick(choices);
      continue;
    }
    const std::vector<std::string> lohi = absl::StrSplit(spec, ',');
    double lo = 0, hi = 0;
    if (lohi.size() != 2 || !absl::SimpleAtod(lohi[0], &lo) || !absl::SimpleAtod(lohi[1], &hi) || hi < lo)
      return absl::InvalidArgumentError(absl::StrCat("bad range {", body, "} in '", text, "'"));
    if (body[0] == 'i') {
      out += absl::StrCat(rng->Range(static_cast<int64_t>(lo), static_cast<int64_t>(hi)));
    } else if (body[0] == 'f') {
      const double v = lo + (hi - lo) * rng->Uniform();
      out += absl::StrFormat("%.3f", v);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown placeholder kind {", body, "}"));
    }
  }
  return out;
}

bool Accepts(const OpSpec& spec, const Shape& in) {
  const std::string& r = spec.rule();
  const int64_t rank = Rank(in);
  if (rank < 2) return false;
  if (r == "elementwise" || r == "noise" || r == "scale_param") return true;
  if (r == "dimwise") return true;
  if (r == "reduce" || r == "argreduce") return !ReducibleDims(in).empty();
  if (r == "linear") return (rank == 2 || rank == 3) && in.back() >= 8 && in.back() <= 16384;
  if (r == "matmul2" || r == "bmm2" || r == "binary2") return false;  // First operator only.
  if (r == "sdpa") return (rank == 3 || rank == 4) && in.back() >= 8 && in.back() <= 256 && in[rank - 2] >= 2 &&
                          in[rank - 2] <= 4096;
  if (r == "mha") return rank == 3 && in[2] >= 16 && in[2] <= 2048 && in[1] <= 4096 && in[2] % 8 == 0;
  if (r == "conv") return ChannelShape(spec, in) && in[1] <= 512 && !ConvKernels(spec, in).empty();
  if (r == "conv_transpose") return ChannelShape(spec, in) && in[1] <= 512 && NumElements(Spatial(in)) <= (1 << 16);
  if (r == "pool") {
    if (!ChannelShape(spec, in)) return false;
    for (int64_t d : Spatial(in))
      if (d < 2) return false;
    return true;
  }
  if (r == "adaptive_pool") return ChannelShape(spec, in);
  if (r == "channel_norm") return ChannelShape(spec, in) && NumElements(Spatial(in)) >= 2;
  if (r == "group_norm") return rank >= 3 && !DivisorsIn(in[1], {2, 4, 8, 16, 32}).empty();
  if (r == "last_dim_norm") return in.back() >= 2;
  if (r == "flatten") return rank >= 3;
  if (r == "transpose") return rank >= 3;
  if (r == "glu") return in.back() >= 2 && in.back() % 2 == 0;
  if (r == "pixel_shuffle") return rank == 4 && in[1] % 4 == 0;
  if (r == "upsample") return ChannelShape(spec, in) && NumElements(Spatial(in)) <= (1 << 16);
  return false;
}

OpParams DrawParams(const OpSpec& spec, const Shape& in, Rng* rng) {
  OpParams p;
  const std::string& r = spec.rule();
  auto extra = FillTemplate(spec.args(), rng);
  p.extra = extra.ok() ? *extra : spec.args();
  if (r == "dimwise") {
    p.dim = rng->Range(1, Rank(in) - 1);
  } else if (r == "reduce" || r == "argreduce") {
    p.dim = rng->Pick(ReducibleDims(in));
    p.keepdim = Rank(in) == 2 || rng->Coin(0.5);
  } else if (r == "linear") {
    p.out = rng->Pick(std::vector<int64_t>{256, 512, 1024, 2048, 4096});
  } else if (r == "mha") {
    std::vector<int64_t> heads;
    for (int64_t h : {1, 2, 4, 8, 16})
      if (in[2] % h == 0 && in[2] / h >= 8) heads.push_back(h);
    p.groups = rng->Pick(heads);
  } else if (r == "conv") {
    p.kernel = rng->Pick(ConvKernels(spec, in));
    p.stride = p.kernel == 1 ? 1 : rng->Range(1, 2);
    p.padding = rng->Coin(0.5) ? p.kernel / 2 : 0;
    p.out = rng->Pick(std::vector<int64_t>{8, 16, 32, 64, 128, 256});
  } else if (r == "conv_transpose") {
    p.kernel = rng->Range(2, 4);
    p.stride = rng->Range(1, 2);
    p.padding = rng->Range(0, 1);
    p.out = rng->Pick(std::vector<int64_t>{8, 16, 32, 64, 128});
  } else if (r == "pool") {
    int64_t min_dim = 1 << 30;
    for (int64_t d : Spatial(in)) min_dim = std::min(min_dim, d);
    p.kernel = std::min<int64_t>(min_dim, rng->Range(2, 3));
    p.stride = rng->Coin(0.7) ? p.kernel : 1;
  } else if (r == "adaptive_pool") {
    int64_t min_dim = 1 << 30;
    for (int64_t d : Spatial(in)) min_dim = std::min(min_dim, d);
    std::vector<int64_t> sizes;
    for (int64_t o : {1, 2, 4, 8})
      if (o <= min_dim) sizes.push_back(o);
    p.out = rng->Pick(sizes);
  } else if (r == "group_norm") {
    p.groups = rng->Pick(DivisorsIn(in[1], {2, 4, 8, 16, 32}));
  } else if (r == "pixel_shuffle") {
    p.groups = 2;
  }
  return p;
}

absl::StatusOr<OpStep> Apply(const OpSpec& spec, const OpParams& p, const Shape& in) {
  if (!Accepts(spec, in) && spec.rule() != "matmul2" && spec.rule() != "bmm2" && spec.rule() != "binary2")
    return absl::InvalidArgumentError(absl::StrCat(spec.name(), " does not accept ", ShapeText(in)));
  OpStep st;
  const std::string& r = spec.rule();
  const int64_t rank = Rank(in);
  const double in_bytes = kF32 * NumElements(in);
  st.out = in;
  if (r == "elementwise") {
    ModuleOrCall(spec, {p.extra}, &st);
  } else if (r == "noise") {
    st.call = absl::StrCat("x + ", p.extra, " * ", spec.symbol(), "(x)");
  } else if (r == "scale_param") {
    Shape ps = {in[1]};
    for (int64_t d = 2; d < rank; ++d) ps.push_back(1);
    const bool divide = p.extra == "/";
    st.init = absl::StrCat("nn.Parameter(torch.", divide ? "rand(" : "randn(", absl::StrJoin(ps, ", "),
                           divide ? ") + 0.5)" : "))");
    st.call = absl::StrCat("x ", p.extra, " {m}");
    st.param_bytes = kF32 * in[1];
  } else if (r == "dimwise") {
    ModuleOrCall(spec, {absl::StrCat("dim=", p.dim), p.extra}, &st);
  } else if (r == "reduce" || r == "argreduce") {
    if (p.dim < 1 || p.dim >= rank) return absl::InvalidArgumentError("reduce dim out of range");
    st.call = FunctionCall(spec, {absl::StrCat("dim=", p.dim), absl::StrCat("keepdim=", p.keepdim ? "True" : "False"),
                                  p.extra});
    if (p.keepdim) {
      st.out[p.dim] = 1;
    } else {
      st.out.erase(st.out.begin() + p.dim);
    }
  } else if (r == "linear") {
    st.init = absl::StrCat(spec.symbol(), "(", Joined({absl::StrCat(in.back(), ", ", p.out), p.extra}), ")");
    st.call = "{m}(x)";
    st.out.back() = p.out;
    st.flops = 2.0 * NumElements(in) * p.out;
    st.param_bytes = kF32 * (in.back() + 1) * p.out;
  } else if (r == "matmul2" || r == "bmm2" || r == "binary2") {
    // The second operand is y (get_inputs' second tensor); shapes come from DrawInputShapes.
    st.call = absl::StrCat(spec.symbol(), "(x, y)");
    if (r != "binary2") {
      if (p.out <= 0 || p.kernel <= 0) return absl::InvalidArgumentError("matmul needs K (kernel) and N (out)");
      st.out.back() = p.out;
      st.flops = 2.0 * NumElements(in) * p.out;
      // matmul2's y does not scale with the batch (rows of x); bmm2's does.
      if (r == "matmul2") st.param_bytes = kF32 * p.kernel * p.out;
    }
  } else if (r == "sdpa") {
    st.call = absl::StrCat(spec.symbol(), "(x, x, x)");
    const double s = in[rank - 2], d = in[rank - 1];
    st.flops = 4.0 * (NumElements(in) / (s * d)) * s * s * d;
  } else if (r == "mha") {
    const int64_t e = in[2];
    st.init = absl::StrCat(spec.symbol(), "(", e, ", ", p.groups, ", batch_first=True)");
    st.call = "{m}(x, x, x, need_weights=False)[0]";
    const double s = in[1];
    st.flops = 2.0 * 4 * s * e * e + 4.0 * s * s * e;
    st.param_bytes = kF32 * 4 * e * (e + 1);
  } else if (r == "conv" || r == "conv_transpose") {
    const bool t = r == "conv_transpose";
    Shape out = {in[0], p.out};
    for (int64_t d : Spatial(in)) {
      const int64_t o = t ? ConvTransposeOut(d, p.kernel, p.stride, p.padding) : ConvOut(d, p.kernel, p.stride, p.padding);
      if (o < 1) return absl::InvalidArgumentError("conv output would be empty");
      out.push_back(o);
    }
    st.init = absl::StrCat(spec.symbol(), "(",
                           Joined({absl::StrCat(in[1], ", ", p.out, ", kernel_size=", p.kernel, ", stride=", p.stride,
                                                ", padding=", p.padding),
                                   p.extra}),
                           ")");
    st.call = "{m}(x)";
    double window = 1;
    for (int i = 0; i < spec.spatial(); ++i) window *= p.kernel;
    const double positions = t ? NumElements(in) / static_cast<double>(in[1]) : NumElements(out) / static_cast<double>(p.out);
    st.flops = 2.0 * positions * in[1] * p.out * window;
    st.param_bytes = kF32 * (in[1] * p.out * window + p.out);
    st.out = out;
  } else if (r == "pool") {
    Shape out = {in[0], in[1]};
    for (int64_t d : Spatial(in)) {
      const int64_t o = ConvOut(d, p.kernel, p.stride, 0);
      if (o < 1) return absl::InvalidArgumentError("pool output would be empty");
      out.push_back(o);
    }
    st.init = absl::StrCat(spec.symbol(), "(",
                           Joined({p.extra, absl::StrCat("kernel_size=", p.kernel, ", stride=", p.stride)}), ")");
    st.call = "{m}(x)";
    st.out = out;
  } else if (r == "adaptive_pool") {
    st.init = absl::StrCat(spec.symbol(), "(", p.out, ")");
    st.call = "{m}(x)";
    for (int64_t d = 2; d < rank; ++d) st.out[d] = p.out;
  } else if (r == "channel_norm") {
    ModuleOrCall(spec, {absl::StrCat(in[1]), p.extra}, &st);
    st.param_bytes = kF32 * 4 * in[1];
  } else if (r == "group_norm") {
    ModuleOrCall(spec, {absl::StrCat(p.groups, ", ", in[1]), p.extra}, &st);
    st.param_bytes = kF32 * 2 * in[1];
  } else if (r == "last_dim_norm") {
    ModuleOrCall(spec, {absl::StrCat(in.back()), p.extra}, &st);
    st.param_bytes = kF32 * 2 * in.back();
  } else if (r == "flatten") {
    st.call = absl::StrCat(spec.symbol(), "(x, 1)");
    st.out = {in[0], NumElements(in) / in[0]};
    st.bytes = 0;  // A view.
    return st;
  } else if (r == "transpose") {
    st.call = absl::StrCat(spec.symbol(), "(x, -1, -2)");
    std::swap(st.out[rank - 1], st.out[rank - 2]);
    st.bytes = 0;  // A view.
    return st;
  } else if (r == "glu") {
    st.call = FunctionCall(spec, {"dim=-1"});
    st.out.back() = in.back() / 2;
  } else if (r == "pixel_shuffle") {
    st.init = absl::StrCat(spec.symbol(), "(", p.groups, ")");
    st.call = "{m}(x)";
    st.out = {in[0], in[1] / (p.groups * p.groups), in[2] * p.groups, in[3] * p.groups};
  } else if (r == "upsample") {
    ModuleOrCall(spec, {p.extra}, &st);
    for (int64_t d = 2; d < rank; ++d) st.out[d] = in[d] * 2;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown rule '", r, "'"));
  }
  st.bytes = in_bytes + kF32 * NumElements(st.out) + st.param_bytes;
  if (r == "binary2") st.bytes += in_bytes;
  if (r == "bmm2") st.bytes += kF32 * in[0] * p.kernel * p.out;  // y: [B, K, N].
  return st;
}

std::vector<Shape> DrawInputShapes(const OpSpec& spec, Rng* rng) {
  const std::string& r = spec.rule();
  const int s = spec.spatial();
  auto channels = [&](int spatial) -> Shape {
    static const std::vector<std::vector<int64_t>> lens = {{}, {128, 256, 512, 1024, 2048, 4096},
                                                           {16, 32, 64, 128, 256}, {8, 16, 32, 64}};
    static const std::vector<std::vector<int64_t>> chans = {{}, {3, 8, 16, 32, 64, 128}, {3, 8, 16, 32, 64},
                                                            {3, 8, 16, 32}};
    Shape shape = {1, rng->Pick(chans[spatial])};
    const int64_t len = rng->Pick(lens[spatial]);
    for (int i = 0; i < spatial; ++i) shape.push_back(len);
    return shape;
  };
  auto any_rank = [&]() -> Shape {
    switch (rng->Range(2, 4)) {
      case 2:
        return {1, rng->Pick(std::vector<int64_t>{1024, 4096, 8192, 16384, 65536})};
      case 3:
        return {1, rng->Pick(std::vector<int64_t>{64, 128, 256, 512, 1024}),
                rng->Pick(std::vector<int64_t>{64, 128, 256, 512, 1024, 4096})};
      default:
        return channels(2);
    }
  };
  if (r == "matmul2") {
    const int64_t k = rng->Pick(std::vector<int64_t>{256, 512, 1024, 2048, 4096});
    const int64_t n = rng->Pick(std::vector<int64_t>{256, 512, 1024, 2048, 4096});
    return {{1, k}, {k, n}};
  }
  if (r == "bmm2") {
    const int64_t m = rng->Pick(std::vector<int64_t>{64, 128, 256, 512, 1024});
    const int64_t k = rng->Pick(std::vector<int64_t>{64, 128, 256, 512});
    const int64_t n = rng->Pick(std::vector<int64_t>{64, 128, 256, 512, 1024});
    return {{1, m, k}, {1, k, n}};
  }
  if (r == "binary2") {
    const Shape x = any_rank();
    return {x, x};
  }
  if (r == "sdpa") {
    const int64_t seq = rng->Pick(std::vector<int64_t>{128, 256, 512, 1024, 2048});
    const int64_t d = rng->Pick(std::vector<int64_t>{32, 64, 128});
    if (rng->Coin(0.5)) return {{1, seq, d}};
    return {{1, rng->Pick(std::vector<int64_t>{4, 8, 16}), seq, d}};
  }
  if (r == "mha") {
    return {{1, rng->Pick(std::vector<int64_t>{64, 128, 256, 512}),
             rng->Pick(std::vector<int64_t>{128, 256, 512, 1024})}};
  }
  if (r == "linear") {
    const int64_t f = rng->Pick(std::vector<int64_t>{256, 512, 1024, 2048, 4096, 8192});
    if (rng->Coin(0.7)) return {{1, f}};
    return {{1, rng->Pick(std::vector<int64_t>{64, 128, 256, 512}), f}};
  }
  for (int attempt = 0; attempt < 20; ++attempt) {
    Shape x;
    if (s > 0) {
      x = channels(s);
    } else if (r == "group_norm" || r == "pixel_shuffle") {
      x = channels(2);
      if (r == "pixel_shuffle" && x[1] % 4 != 0) x[1] = 16;
    } else if (r == "flatten" || r == "transpose") {
      x = rng->Coin(0.5) ? channels(2) : Shape{1, 256, 512};
    } else {
      x = any_rank();
    }
    if (Accepts(spec, x)) return {x};
  }
  return {};
}

}  // namespace kernelrl
