#!/usr/bin/env python3
"""Write deploy/k8s/prometheusrule.yaml from deploy/prometheus/evoharness.rules.yml (the one source of the rules).

    python scripts/gen_prometheusrule.py           # rewrite the manifest
    python scripts/gen_prometheusrule.py --check   # exit 1 if the manifest is stale

The rule file's text is embedded under `spec:` as it is (indented), so comments and block scalars survive."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "deploy" / "prometheus" / "evoharness.rules.yml"
MANIFEST = ROOT / "deploy" / "k8s" / "prometheusrule.yaml"

HEADER = """\
# GENERATED from deploy/prometheus/evoharness.rules.yml by scripts/gen_prometheusrule.py: edit that file, then
# rerun the script (tests/deploy/test_prometheus_rules.py fails while the two differ).
# Prometheus Operator: the Prometheus resource's ruleSelector must match these labels.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: evoharness
  labels: {app.kubernetes.io/part-of: evoharness}
spec:
"""


def render(rules_text: str) -> str:
    lines = [line for line in rules_text.splitlines() if not line.startswith("#")]  # the file's own header
    body = "".join(f"  {line}\n" if line else "\n" for line in lines)
    return HEADER + body


def main(argv: list[str]) -> int:
    want = render(RULES.read_text())
    if "--check" in argv:
        stale = not MANIFEST.exists() or MANIFEST.read_text() != want
        if stale:
            print(f"{MANIFEST.relative_to(ROOT)} is stale: run python scripts/gen_prometheusrule.py", file=sys.stderr)
        return int(stale)
    MANIFEST.write_text(want)
    print(f"wrote {MANIFEST.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
