"""The sandbox's end-to-end tests on the CPU backend: the real Evaluator, its
zygote and containment, from the runfiles (tests/e2e_util.h finds them)."""

def cpu_e2e_test(name, size = "medium", data = [], deps = []):
    """A cc_test of tests/<name>.cc with e2e_util.h, the harness files and the core."""
    native.cc_test(
        name = name,
        size = size,
        srcs = [
            "tests/e2e_util.h",
            "tests/%s.cc" % name,
        ],
        data = [":e2e_data"] + data,
        deps = [
            ":child_env_host",
            ":core",
            "//common/testing",
            "@system//:gtest_main",
        ] + deps,
    )
