// y[b, o] = max(0, sum_i x[b, i] * w[o, i] + bias[o])
extern "C" int linear_relu(const float* x, const float* w, const float* bias, float* y,
                           long long batch, long long in, long long out) {
  for (long long b = 0; b < batch; ++b) {
    for (long long o = 0; o < out; ++o) {
      float acc = bias[o];
      for (long long i = 0; i < in; ++i) acc += x[b * in + i] * w[o * in + i];
      y[b * out + o] = acc > 0.0f ? acc : 0.0f;
    }
  }
  return 0;
}
