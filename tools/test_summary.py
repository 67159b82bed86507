#!/usr/bin/env python3
"""Counts what `bazel test` did, from its output and the test logs it wrote.

usage: test_summary.py BAZEL_OUTPUT_LOG TESTLOGS_DIR

A target that passed but skipped any case counts as skipped, not passed, and
is listed with each skipped case and its reason. Skips are found where tests
signal them: GoogleTest's XML (`result="skipped"`, GTEST_SKIP), a line
starting "SKIPPED" in test.log (the harness's Python test scripts), unittest's
"... skipped 'reason'" lines. Failed = FAILED, FAILED TO BUILD, TIMEOUT,
NO STATUS, INCOMPLETE, FLAKY. The last line is "N passed, N failed, N skipped"
followed by the skipped targets' names.
"""
import glob
import os
import re
import sys
import xml.etree.ElementTree as ET

STATUS = re.compile(r"^(//\S+)\s+(?:\(cached\)\s+)?(PASSED|FAILED TO BUILD|FAILED|TIMEOUT|NO STATUS|INCOMPLETE|FLAKY|SKIPPED)\b")
UNITTEST_SKIP = re.compile(r"^(\S+) \(([\w.]+)\)(?:\s.*)? \.\.\. skipped '(.*)'$")


def log_dirs(testlogs, label):
    pkg, _, name = label[2:].partition(":")
    base = os.path.join(testlogs, pkg, name)
    shards = sorted(glob.glob(os.path.join(base, "shard_*")))
    return shards or [base]


def skips_in(testlogs, label):
    """[(case, reason)] this target skipped."""
    found = []
    for d in log_dirs(testlogs, label):
        xml_path = os.path.join(d, "test.xml")
        try:
            root = ET.parse(xml_path).getroot()
            for case in root.iter("testcase"):
                skipped = case.find("skipped")
                if case.get("result") == "skipped" or skipped is not None:
                    reason = skipped.get("message", "") if skipped is not None else ""
                    # GoogleTest writes "file:line\nmessage"; keep the message.
                    reason = " ".join(l.strip() for l in reason.splitlines()
                                      if l.strip() and not re.fullmatch(r"\S+:\d+", l.strip()))
                    found.append((f"{case.get('classname', '')}.{case.get('name', '')}", reason))
        except (OSError, ET.ParseError):
            pass
        try:
            with open(os.path.join(d, "test.log"), errors="replace") as f:
                for line in f:
                    line = line.rstrip("\n")
                    if line.startswith("SKIPPED"):
                        found.append(("", line.partition(":")[2].strip() or line))
                    m = UNITTEST_SKIP.match(line)
                    if m:  # Python >= 3.11 prints "name (module.Class.name)".
                        name, where = m.group(1), m.group(2)
                        found.append((where if where.endswith("." + name) else f"{where}.{name}", m.group(3)))
        except OSError:
            pass
    # GoogleTest also prints its skips to test.log; the XML already has them.
    seen, unique = set(), []
    for case, reason in found:
        if (case, reason) not in seen:
            seen.add((case, reason))
            unique.append((case, reason))
    return unique


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    status = {}
    with open(argv[1], errors="replace") as f:
        for line in f:
            m = STATUS.match(line)
            if m:
                status[m.group(1)] = m.group(2)
    passed, failed, skipped = [], [], []
    for label, st in sorted(status.items()):
        if st == "PASSED":
            cases = skips_in(argv[2], label)
            (skipped if cases else passed).append((label, cases))
        elif st == "SKIPPED":
            skipped.append((label, [("", "bazel did not run it")]))
        else:
            failed.append((label, st))
    for label, st in failed:
        print(f"failed:  {label} ({st})")
    for label, cases in skipped:
        by_reason = {}
        for case, reason in cases:
            by_reason.setdefault(reason or "no reason given", []).append(case)
        for reason, names in by_reason.items():
            names = [n for n in names if n]
            shown = " " + ", ".join(names[:2]) + (f" (+{len(names) - 2} more)" if len(names) > 2 else "") if names else ""
            print(f"skipped: {label}{shown}: {reason}")
    names = ", ".join(label for label, _ in skipped)
    print(f"{len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped" + (f" ({names})" if names else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
