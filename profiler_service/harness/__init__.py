"""Trusted timing harness of the profiler (see docs/PROFILER.md).

It only measures; profiler_service/ (C++) judges. Entry points:
  protocol.run_protocol      - the timing protocol; the sandbox runs it in its trusted reference process;
  precompute                 - eager / torch.compile baselines for a task set.
"""
