"""Trusted timing harness of the profiler (see docs/PROFILER.md).

It only measures; profiler_service/ (C++) judges. Entry points:
  profile.profile_candidate  - called by the sandbox's harness after verify passes;
  precompute                 - eager / torch.compile baselines for a task set.
"""
