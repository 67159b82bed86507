#include <cmath>

// Row-wise softmax with the max subtracted first (stable for large inputs).
extern "C" int softmax_rows(const float* x, float* y, long long rows, long long cols) {
  for (long long r = 0; r < rows; ++r) {
    const float* in = x + r * cols;
    float* out = y + r * cols;
    float m = in[0];
    for (long long c = 1; c < cols; ++c) m = in[c] > m ? in[c] : m;
    double sum = 0.0;
    for (long long c = 0; c < cols; ++c) {
      out[c] = std::exp(in[c] - m);
      sum += out[c];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (long long c = 0; c < cols; ++c) out[c] *= inv;
  }
  return 0;
}
