"""Run tests/integration/test_bad_input.py and summarise it in bench-results/bad_input.json:
{cases, passed, failed: [{case, message}]}.

    .venv/bin/python scripts/bad_input_report.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from contextfs.testing import write_json

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "tests/integration/test_bad_input.py",
                f"--junitxml={xml}",
            ],
            cwd=REPO,
        )
        root = ET.parse(xml).getroot()
    cases, failed = 0, []
    for tc in root.iter("testcase"):
        cases += 1
        bad = tc.find("failure")
        if bad is None:
            bad = tc.find("error")
        if bad is not None:
            failed.append(
                {
                    "case": tc.get("name"),
                    "message": (bad.get("message") or "").splitlines()[0][:300],
                }
            )
    out = {"cases": cases, "passed": cases - len(failed), "failed": failed}
    write_json(REPO / "bench-results/bad_input.json", out)
    print(f"{out['passed']}/{cases} passed; failed: {[f['case'] for f in failed]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
