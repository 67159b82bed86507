"""deploy/ renders, validates and agrees with the binaries it runs.

For every kustomization (overlays/cpu-only, overlays/gpu, monitoring):
  1. `kubectl kustomize` renders it (Debian's kubectl 1.20 / kustomize 2.0, or newer);
  2. every object validates against the Kubernetes OpenAPI schemas (kubernetes-validate,
     strict: unknown fields rejected) of the oldest supported release and the newest;
     prometheus-operator objects are checked by hand (no schema ships for CRDs);
  3. every workload agrees with its binary: the generated ConfigMap's config is accepted
     (`--print_config` exits 0), container ports and probes are the config's ports, the
     termination grace covers preStop + drain + grace + 5 s;
  4. cluster invariants: no pod gets a service-account token, every container runs
     non-root with a read-only root filesystem and no capabilities, Services are headless
     and select a workload, PodDisruptionBudgets select a workload, GPUs only in the gpu
     overlay, and the NetworkPolicies allow exactly the flows in EXPECTED_FLOWS.
"""
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import kubernetes_validate
import yaml

import ops_netpol

SCHEMA_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]  # 1.30: appArmorProfile, preStop sleep
BINARIES = {"learner": "learner/learner_main", "actor": "actor/actor_main",
            "sandbox": "sandbox/sandbox_main"}
# (from, to, port) the data path needs; every other pod-to-pod pair must be denied.
EXPECTED_FLOWS = {("actor", "learner", 50051), ("actor", "sandbox", 50052)}
CRD_GROUPS = ("monitoring.coreos.com/",)


def render(kubectl, root, name):
    run = subprocess.run([kubectl, "kustomize", os.path.join(root, name)], capture_output=True, text=True)
    assert run.returncode == 0, f"{name}: kustomize failed: {run.stderr.strip()}"
    docs = [d for d in yaml.safe_load_all(run.stdout) if d]
    assert docs, f"{name}: rendered nothing"
    return docs


def validate_schemas(name, docs):
    for version in SCHEMA_VERSIONS:
        for d in docs:
            if d["apiVersion"].startswith(CRD_GROUPS):
                continue
            try:
                kubernetes_validate.validate(d, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                raise AssertionError(f"{name}: {d['kind']}/{d['metadata']['name']} invalid for {version}: {e.message}")
    # The validator is live: a typo'd field in a rendered Deployment must fail.
    broken = copy.deepcopy(next(d for d in docs if d["kind"] in ("Deployment", "StatefulSet")))
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"grpc": {"port": 1}}
    try:
        kubernetes_validate.validate(broken, SCHEMA_VERSIONS[0], strict=True)
        raise AssertionError("kubernetes-validate accepted an unknown field")
    except kubernetes_validate.ValidationError:
        pass


def config_field(text, key):
    """First `key: value` in --print_config output (protobuf text format)."""
    for line in text.splitlines():
        parts = line.strip().split(":", 1)
        if len(parts) == 2 and parts[0] == key:
            return parts[1].strip().strip('"')
    return None


def check_workload(name, w, configmaps, tmp):
    spec = w["spec"]["template"]["spec"]
    app = w["metadata"]["labels"]["app.kubernetes.io/name"]
    where = f"{name}: {w['kind']}/{w['metadata']['name']}"
    assert spec.get("automountServiceAccountToken") is False, f"{where}: pod would get a service-account token"
    assert spec.get("enableServiceLinks") is False, f"{where}: service links leak peers' addresses into env"
    pod_sc = spec.get("securityContext", {})
    assert pod_sc.get("runAsNonRoot") is True and pod_sc.get("runAsUser", 0) > 0, f"{where}: runs as root"
    assert "seccompProfile" in pod_sc, f"{where}: no seccomp profile chosen"
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    claims = {c["metadata"]["name"] for c in w["spec"].get("volumeClaimTemplates", [])}
    (container,) = spec["containers"]
    sc = container["securityContext"]
    assert sc == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                  "capabilities": {"drop": ["ALL"]}}, f"{where}: container securityContext {sc}"
    for m in container["volumeMounts"]:
        assert m["name"] in volumes or m["name"] in claims, f"{where}: mount {m['name']} has no volume"
    assert container["command"][0] == "/opt/kernelrl/" + BINARIES[app], f"{where}: command {container['command']}"

    # The binary accepts the generated config.
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/etc/kernelrl")
    cm_name = volumes[mount["name"]]["configMap"]["name"]
    assert cm_name in configmaps, f"{where}: ConfigMap {cm_name} not rendered"
    assert "--config=/etc/kernelrl/config.textproto" in container["command"]
    path = os.path.join(tmp, cm_name + ".textproto")
    with open(path, "w") as f:
        f.write(configmaps[cm_name]["data"]["config.textproto"])
    run = subprocess.run([BINARIES[app], "--config=" + path, "--print_config"], capture_output=True, text=True)
    assert run.returncode == 0, f"{where}: {BINARIES[app]} rejects ConfigMap {cm_name}: {run.stderr.strip()}"
    effective = run.stdout
    grpc_port, metrics_port = int(config_field(effective, "grpc_port")), int(config_field(effective, "metrics_port"))
    assert config_field(effective, "listen_address") == "0.0.0.0", f"{where}: listens on loopback only"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    want_ports = {"grpc": grpc_port, "metrics": metrics_port}
    if config_field(effective, "openai_enabled") == "true":  # The policy server's OpenAI HTTP API.
        want_ports["openai"] = int(config_field(effective, "openai_port"))
    assert ports == want_ports, f"{where}: ports {ports} vs config"
    assert container["readinessProbe"]["grpc"]["port"] == grpc_port, f"{where}: readiness probe port"
    if "startupProbe" in container:
        assert container["startupProbe"]["grpc"]["port"] == grpc_port, f"{where}: startup probe port"
    # Liveness must not follow gRPC health: a draining pod reports NOT_SERVING.
    assert container["livenessProbe"]["tcpSocket"]["port"] == metrics_port, f"{where}: liveness probe port"
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    need = pre_stop + float(config_field(effective, "drain_seconds") or 0) + \
        float(config_field(effective, "grace_seconds") or 0) + 5
    assert spec["terminationGracePeriodSeconds"] >= need, f"{where}: grace period below {need}"
    annotations = w["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(metrics_port), f"{where}: scrape port"
    gpus = container["resources"].get("limits", {}).get("nvidia.com/gpu")
    print(f"  {where}: {BINARIES[app]} accepts {cm_name}; ports {grpc_port}/{metrics_port}; "
          f"grace {spec['terminationGracePeriodSeconds']} >= {need:g}; gpus {gpus or 0}")
    return app, effective, gpus


def check_overlay(name, docs, tmp):
    validate_schemas(name, docs)
    kinds = {}
    for d in docs:
        kinds.setdefault(d["kind"], []).append(d)
        assert d["kind"] == "Namespace" or d["metadata"].get("namespace") == "kernelrl", \
            f"{name}: {d['kind']}/{d['metadata']['name']} outside namespace kernelrl"
    configmaps = {d["metadata"]["name"]: d for d in kinds.get("ConfigMap", [])}
    workloads = kinds.get("Deployment", []) + kinds.get("StatefulSet", [])
    apps = {}
    for w in workloads:
        app, effective, gpus = check_workload(name, w, configmaps, tmp)
        apps[app] = (w, effective, gpus)
    assert sorted(apps) == sorted(BINARIES), f"{name}: workloads {sorted(apps)}"
    learner = apps["learner"][0]
    assert learner["kind"] == "StatefulSet" and learner["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == \
        "checkpoints", f"{name}: learner is not a StatefulSet with a checkpoint volume"
    # The learner's state_dir (jobs, ledger, checkpoints) is that volume, not the read-only root.
    state_dir = config_field(apps["learner"][1], "state_dir")
    mounts = {m["mountPath"]: m["name"] for m in learner["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert mounts.get(state_dir) == "checkpoints", f"{name}: learner state_dir {state_dir} is not on its volume"
    accounts = {a["metadata"]["name"]: a for a in kinds["ServiceAccount"]}
    for a in accounts.values():
        assert a.get("automountServiceAccountToken") is False, f"{name}: ServiceAccount {a['metadata']['name']}"
    for w, _, _ in apps.values():
        assert w["spec"]["template"]["spec"]["serviceAccountName"] in accounts

    def selects(selector, w):
        labels = w["spec"]["template"]["metadata"]["labels"]
        return all(labels.get(k) == v for k, v in selector.items())

    for s in kinds["Service"]:
        assert s["spec"].get("clusterIP") == "None", f"{name}: Service {s['metadata']['name']} is not headless"
        (w,) = [w for w, _, _ in apps.values() if selects(s["spec"]["selector"], w)]
        names = {p["name"] for p in w["spec"]["template"]["spec"]["containers"][0]["ports"]}
        for p in s["spec"]["ports"]:
            assert p["targetPort"] in names, f"{name}: Service {s['metadata']['name']} port {p['targetPort']}"
    assert "learner" in {s["metadata"]["name"] for s in kinds["Service"]}
    assert learner["spec"]["serviceName"] == "learner"
    budgets = kinds["PodDisruptionBudget"]
    for app_name, (w, _, _) in apps.items():
        matching = [b for b in budgets if selects(b["spec"]["selector"]["matchLabels"], w)]
        assert len(matching) == 1, f"{name}: {app_name} has {len(matching)} PodDisruptionBudgets"

    # The actor reaches the learner and the sandboxes through their headless Services.
    ports_of = {s["metadata"]["name"]: {p["port"] for p in s["spec"]["ports"]} for s in kinds["Service"]}
    actor_config = apps["actor"][1]
    for key in ("learner_address", "address", "target"):
        value = config_field(actor_config, key) or ""
        match = re.fullmatch(r"dns:///([a-z0-9-]+)\.kernelrl\.svc\.cluster\.local:(\d+)", value)
        assert match and int(match.group(2)) in ports_of.get(match.group(1), ()), \
            f"{name}: actor {key} {value!r} names no Service port"
    actor_mounts = [m["mountPath"] for m in apps["actor"][0]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]]
    for key in ("tokenizer_path", "workspace_root"):
        value = config_field(actor_config, key) or ""
        assert any(value.startswith(m + "/") for m in actor_mounts), f"{name}: actor {key} {value} on no volume"

    # GPUs: the gpu overlay gives sandbox and learner one each; cpu-only none,
    # and its sandbox runs the CPU backend.
    gpu_apps = sorted(a for a, (_, _, g) in apps.items() if g)
    sandbox_backend = config_field(apps["sandbox"][1], "backend")
    if name == "overlays/gpu":
        assert gpu_apps == ["learner", "sandbox"] and all(apps[a][2] == 1 for a in gpu_apps), gpu_apps
        assert sandbox_backend in (None, "cuda"), sandbox_backend
        sandbox_spec = apps["sandbox"][0]["spec"]["template"]["spec"]
        assert any(t.get("key") == "nvidia.com/gpu" for t in sandbox_spec.get("tolerations", []))
    else:
        assert gpu_apps == [], f"{name}: GPUs requested by {gpu_apps}"
        assert sandbox_backend == "cpu", f"{name}: sandbox backend {sandbox_backend}"

    flows = ops_netpol.allowed_flows(kinds["NetworkPolicy"], {a: w for a, (w, _, _) in apps.items()})
    assert flows == EXPECTED_FLOWS, f"{name}: NetworkPolicies allow {sorted(flows)}, want {sorted(EXPECTED_FLOWS)}"
    dns = ops_netpol.dns_allowed(kinds["NetworkPolicy"], {a: w for a, (w, _, _) in apps.items()})
    assert dns == {"actor", "learner"}, f"{name}: DNS egress for {sorted(dns)}"
    scrapes = ops_netpol.metrics_ingress(kinds["NetworkPolicy"], {a: w for a, (w, _, _) in apps.items()})
    assert scrapes == set(BINARIES), f"{name}: monitoring may scrape only {sorted(scrapes)}"
    print(f"{name}: {len(docs)} objects valid for Kubernetes {', '.join(SCHEMA_VERSIONS)}; "
          f"flows {sorted(flows)}; DNS for {sorted(dns)}")


def check_monitoring(docs, overlay_docs):
    by_kind = {d["kind"]: d for d in docs}
    monitor = by_kind["ServiceMonitor"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    services = [s for s in overlay_docs if s["kind"] == "Service"]
    scraped = [s for s in services if all(s["metadata"]["labels"].get(k) == v for k, v in selector.items())]
    assert len(scraped) == len(BINARIES), f"ServiceMonitor selects {len(scraped)} Services"
    port = monitor["spec"]["endpoints"][0]["port"]
    for s in scraped:
        assert port in {p["name"] for p in s["spec"]["ports"]}, f"Service {s['metadata']['name']} lacks port {port}"
        assert monitor["spec"]["jobLabel"] in s["metadata"]["labels"]
    rule = by_kind["PrometheusRule"]
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    for want in ("KernelrlSandboxWorkerUnhealthy", "KernelrlEvaluationTimeoutRate", "KernelrlHackDetectedSpike",
                 "KernelrlLearnerStalled", "KernelrlTrajectoryStaleness"):
        assert want in alerts, f"PrometheusRule lacks {want}"
    dashboard = json.loads(by_kind["ConfigMap"]["data"]["kernelrl.json"])
    assert dashboard["panels"] and all(p["targets"] for p in dashboard["panels"])
    print(f"monitoring: ServiceMonitor scrapes {sorted(s['metadata']['name'] for s in scraped)}; "
          f"{len(alerts)} alerts; dashboard with {len(dashboard['panels'])} panels")


def yamllint(root):
    run = subprocess.run([sys.executable, "-m", "yamllint", "-c", os.path.join(root, ".yamllint"), "-s", root],
                         capture_output=True, text=True)
    assert run.returncode == 0, f"yamllint:\n{run.stdout}{run.stderr}"
    print("yamllint: clean")


def main():
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl not installed (tools/setup.sh installs Debian's kubernetes-client)"
    version = subprocess.run([kubectl, "version", "--client"], capture_output=True, text=True).stdout
    print(f"renderer: {kubectl} kustomize ({' '.join(version.split())[:120]})")
    with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as tmp:
        # A real copy: kustomize refuses files that resolve outside the kustomization
        # root, which Bazel's runfiles symlinks do.
        root = os.path.join(tmp, "deploy")
        shutil.copytree("deploy", root, symlinks=False)
        os.environ.setdefault("HOME", tmp)
        yamllint(root)
        overlays = {}
        for name in ("overlays/cpu-only", "overlays/gpu"):
            overlays[name] = render(kubectl, root, name)
            check_overlay(name, overlays[name], tmp)
        monitoring = render(kubectl, root, "monitoring")
        validate_schemas_monitoring = [d for d in monitoring if not d["apiVersion"].startswith(CRD_GROUPS)]
        for version in SCHEMA_VERSIONS:
            for d in validate_schemas_monitoring:
                kubernetes_validate.validate(d, version, strict=True)
        check_monitoring(monitoring, overlays["overlays/gpu"])
    print("deploy: 3 kustomizations rendered and checked")


if __name__ == "__main__":
    sys.exit(main())
