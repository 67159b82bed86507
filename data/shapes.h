// Shape rules of the composer: for each rule (OpSpec.rule), whether an
// operator accepts a tensor shape, which parameters it draws for it, and what
// it then is: constructor and call text, output shape, bytes moved and FLOPs.
//
// Invariant: dim 0 is the batch. No rule reads, reduces, splits or moves it,
// so output shapes and costs are affine in it and the composer sizes a task
// (picks the batch) after composing it at batch 1. Every shape has rank >= 2.
#ifndef KERNELRL_DATA_SHAPES_H_
#define KERNELRL_DATA_SHAPES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/data.pb.h"
#include "data/rng.h"

namespace kernelrl {

using ::kernelrl::v1::OpSpec;
using Shape = std::vector<int64_t>;

std::string ShapeText(const Shape& s);  // "[2, 3, 4]"
int64_t NumElements(const Shape& s);

// Known rule names; the catalogue rejects specs naming any other.
bool IsKnownRule(const std::string& rule);

// What an operator drew for one input shape; Apply() is a pure function of it.
struct OpParams {
  int64_t out = 0;      // out_features / out_channels / output_size
  int64_t kernel = 0;
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dim = 0;      // dimwise / reduce dim (>= 1)
  bool keepdim = false;
  int64_t groups = 0;   // GroupNorm groups, attention heads, pixel-shuffle factor
  std::string extra;    // OpSpec.args with its template filled in
};

// One instantiated operator of a task.
struct OpStep {
  std::string init;     // Attribute value built in __init__ (module or nn.Parameter); "" for none.
  std::string call;     // Forward expression over x (and y); "{m}" stands for the module attribute.
  Shape out;
  double bytes = 0;     // Tensor bytes read and written (fp32), parameters included.
  double flops = 0;     // Matmul/conv/attention FLOPs; 0 for memory-bound operators.
  double param_bytes = 0;  // The part of bytes that does not scale with the batch.
};

bool Accepts(const OpSpec& spec, const Shape& in);
// Requires Accepts(spec, in).
OpParams DrawParams(const OpSpec& spec, const Shape& in, Rng* rng);
absl::StatusOr<OpStep> Apply(const OpSpec& spec, const OpParams& params, const Shape& in);

// For the first operator: the get_inputs() tensor shapes it starts from, at
// batch 1 (two tensors for first_only binary rules, else one).
std::vector<Shape> DrawInputShapes(const OpSpec& spec, Rng* rng);

// Fills an argument template: {f:a,b} uniform float (3 decimals), {i:a,b}
// integer in [a, b], {c:x|y} one of the choices. Other text is copied.
absl::StatusOr<std::string> FillTemplate(const std::string& text, Rng* rng);

}  // namespace kernelrl

#endif  // KERNELRL_DATA_SHAPES_H_
