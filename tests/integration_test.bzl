"""The integration suites of tests/."""

load("//tools:build_defs.bzl", "cctune_cc_test")

def integration_test(name, data = [], deps = [], **kwargs):
    """tests/<name>.cc as a medium-sized test whose OpenMP threads yield when idle.

    Many tiny parallel regions: spinning OpenMP threads crawl on a shared machine.
    """
    cctune_cc_test(
        name = name,
        size = "medium",
        env = {"OMP_WAIT_POLICY": "passive"},
        srcs = [name + ".cc"],
        data = data,
        deps = deps,
        **kwargs
    )
