#!/usr/bin/env python3
"""Summarises critest's junit report: "PASSED FAILED SKIPPED", then FAIL:/FLAKED: lines.

One "FAIL: spec :: why" per failed spec, one "FLAKED: spec :: why" per spec that passed on a
retry (--ginkgo.flake-attempts).

junit_summary.py JUNIT_XML (hack/vm/critest.sh, hack/kind/lane-critest.sh)
"""
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception as err:
    print("0 0 0"); print(f"FAIL: [no junit report: {err}]"); sys.exit()
passed = failed = skipped = 0; fails = []; flaked = []
for tc in root.iter("testcase"):
    name = tc.get("name", "")
    bad = tc.find("failure") is not None or tc.find("error") is not None
    if name.startswith("[") and "Suite]" in name.split(" ")[0]:
        if bad: fails.append(name)   # ginkgo's suite nodes: not specs, but a failure shows
        continue
    if tc.find("skipped") is not None or tc.get("status") in ("skipped", "pending"):
        skipped += 1
    elif bad:
        failed += 1
        node = tc.find("failure") if tc.find("failure") is not None else tc.find("error")
        why = " ".join((node.get("message") or node.text or "").split())[:400]
        fails.append(f"{name} :: {why}" if why else name)
    else:
        passed += 1
        # Passed on a retry (--ginkgo.flake-attempts): said, with the first attempt's failure.
        err = tc.findtext("system-err") or ""
        if "Attempt #1" in err and "Retrying" in err:
            why = err.split("[FAILED]", 1)[1] if "[FAILED]" in err else ""
            flaked.append(f"{name} :: {' '.join(why.split())[:400]}")
print(passed, failed, skipped)
for name in fails: print("FAIL: " + name)
for name in flaked: print("FLAKED: " + name)
