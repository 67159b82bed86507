// The same ReLU written `repeats` times through a volatile pointer: the
// compiler may not drop the repeated stores, so the cost is real.
extern "C" int relu_slow(const float* x, float* y, long long n, long long repeats) {
  volatile float* out = y;
  for (long long r = 0; r < repeats; ++r) {
    for (long long i = 0; i < n; ++i) out[i] = x[i] > 0 ? x[i] : 0.0f;
  }
  return 0;
}
