extern "C" int relu_forward(const float* x, float* y, long long n) {
  for (long long i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0.0f;
  return 0;
}
