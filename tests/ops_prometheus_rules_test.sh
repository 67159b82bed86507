#!/usr/bin/env bash
# deploy/monitoring/: the PrometheusRule's spec is a valid rule file (`promtool check
# rules`) whose alerts pass their unit tests (tests/ops_alert_rules_test.yaml,
# `promtool test rules`); every Grafana panel query parses (as a recording rule);
# every metric they read is in tests/ops_metrics_catalog.txt.
set -euo pipefail
command -v promtool >/dev/null || { echo "promtool not installed (apt-get install prometheus)"; exit 1; }
tmp="${TEST_TMPDIR:-$(mktemp -d)}"

python3 - "$tmp" <<'PY'
import json, re, sys, yaml
tmp = sys.argv[1]
rule = yaml.safe_load(open("deploy/monitoring/prometheus-rule.yaml"))
assert rule["kind"] == "PrometheusRule"
yaml.safe_dump(rule["spec"], open(f"{tmp}/kernelrl-rules.yaml", "w"), sort_keys=False)
dashboard = json.load(open("deploy/monitoring/grafana-dashboard.json"))
exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
# Grafana's $__rate_interval becomes a fixed window so promtool can parse the query.
panels = [{"record": f"kernelrl:dashboard_panel_{i}", "expr": e.replace("$__rate_interval", "5m")}
          for i, e in enumerate(exprs)]
yaml.safe_dump({"groups": [{"name": "dashboard", "rules": panels}]}, open(f"{tmp}/dashboard-queries.yaml", "w"))
catalog = {l.split()[0] for l in open("tests/ops_metrics_catalog.txt") if l.strip() and not l.startswith("#")}
rule_exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
recorded = {r["record"] for g in rule["spec"]["groups"] for r in g["rules"] if "record" in r}
words = set()
for e in rule_exprs + exprs:
    e = re.sub(r'"[^"]*"', "", e)                    # label values
    e = re.sub(r"\b(by|without|on|ignoring|group_left)\s*\([^)]*\)", "", e)  # label lists
    e = re.sub(r"\{[^}]*\}", "", e)                  # matchers
    words |= set(re.findall(r"\b(?:kernelrl_[a-z0-9_]+|up)\b", e))
missing = sorted(w for w in words if w not in catalog and w not in recorded)
assert not missing, f"metrics used but not in tests/ops_metrics_catalog.txt: {missing}"
print(f"{len(rule_exprs)} rule and {len(exprs)} panel queries read {len(words)} metrics, all catalogued")
PY

cp tests/ops_alert_rules_test.yaml "$tmp/"
promtool check rules "$tmp/kernelrl-rules.yaml"
promtool check rules "$tmp/dashboard-queries.yaml"
(cd "$tmp" && promtool test rules ops_alert_rules_test.yaml)
alerts=$(grep -c 'alertname:' tests/ops_alert_rules_test.yaml)
echo "promtool: rules valid, dashboard queries parse, ${alerts} alert expectations pass"
