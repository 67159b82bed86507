"""deploy/ renders, validates and agrees with the binaries it runs.

For every kustomization (overlays/cpu-only, overlays/gpu, overlays/learner-group,
overlays/policy-replicas, monitoring):
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
     overlays, and the NetworkPolicies allow exactly the flows in EXPECTED_FLOWS;
  5. the learner StatefulSet is the group its config's `distributed` section describes
     (replicas = hosts, GPUs = ranks_per_host); for a multi-host group (overlays/learner-group)
     also: Parallel pods, host_rank from the pod index, a rendezvous address on a headless
     Service that publishes not-ready pods, clients sent to pod 0 only, state_dir on one
     ReadWriteMany claim, learner <-> learner on every TCP port, and otherwise the base config;
  6. engine replicas in their own pods (overlays/policy-replicas): as many pods as the
     learner's policy.remote_replicas.count and the replicas' config say, Parallel, each
     pod's index from its pod-index label, one GPU each, the sync group's rendezvous on a
     Service that publishes the not-ready learner-0, the actors sampling from the replicas,
     learner <-> replica on every TCP port (NCCL).
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
            "sandbox": "sandbox/sandbox_main", "policy-replica": "learner/policy_replica_main"}
BASE_APPS = ("actor", "learner", "sandbox")
# Overlays that add workloads to the base's.
OVERLAY_APPS = {"overlays/policy-replicas": BASE_APPS + ("policy-replica",)}
# (from, to, port) the data path needs; every other pod-to-pod pair must be denied.
EXPECTED_FLOWS = {("actor", "learner", 50051), ("actor", "sandbox", 50052)}
# The learner group's ranks also reach each other on every TCP port (TCPStore, NCCL):
# here, every port the learner declares.
GROUP_FLOWS = {("learner", "learner", port) for port in (50051, 9101, 8000, 29500)}
GPU_OVERLAYS = ("overlays/gpu", "overlays/learner-group", "overlays/policy-replicas")
# Replicas and the learner reach each other on every TCP port (TCPStore, NCCL); the
# actors reach the replicas' gRPC port.
REPLICA_FLOWS = ({("actor", "policy-replica", 50061)} | {("learner", "policy-replica", p) for p in (50061, 9111)} |
                 {("policy-replica", "learner", p) for p in (50051, 9101, 8000, 29600)})
# Kubernetes >= 1.28 labels each StatefulSet pod with its index.
POD_INDEX_FIELD = "metadata.labels['apps.kubernetes.io/pod-index']"
# Labels the StatefulSet controller puts on its pods (not in the template).
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
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


def expand(where, arg, env, pod_index):
    """Kubernetes' $(VAR) expansion of a container argument; the pod-index label is `pod_index`."""
    def value(m):
        var = env.get(m.group(1))
        assert var is not None, f"{where}: $({m.group(1)}) in {arg!r} is not in the container's env"
        if "value" in var:
            return var["value"]
        assert var["valueFrom"]["fieldRef"]["fieldPath"] == POD_INDEX_FIELD, f"{where}: {m.group(1)} is {var}"
        return str(pod_index)
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", value, arg)


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
    # With the container's own flags (e.g. the group's host_rank from the pod index), as the
    # last pod of the workload gets them.
    env = {e["name"]: e for e in container.get("env", [])}
    last = w["spec"].get("replicas", 1) - 1
    args = [expand(where, a, env, last) for a in container["command"][1:]]
    args = ["--config=" + path if a == "--config=/etc/kernelrl/config.textproto" else a for a in args]
    run = subprocess.run([BINARIES[app]] + args + ["--print_config"], capture_output=True, text=True)
    assert run.returncode == 0, f"{where}: {BINARIES[app]} rejects ConfigMap {cm_name}: {run.stderr.strip()}"
    effective = run.stdout
    grpc_port, metrics_port = int(config_field(effective, "grpc_port")), int(config_field(effective, "metrics_port"))
    assert config_field(effective, "listen_address") == "0.0.0.0", f"{where}: listens on loopback only"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    want_ports = {"grpc": grpc_port, "metrics": metrics_port}
    if config_field(effective, "openai_enabled") == "true":  # The policy server's OpenAI HTTP API.
        want_ports["openai"] = int(config_field(effective, "openai_port"))
    rendezvous = config_field(effective, "rendezvous")
    if rendezvous and app == "learner":  # The TCPStore it hosts: the learner group's, or the replicas'.
        want_ports["rendezvous"] = int(rendezvous.rsplit(":", 1)[1])
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
    want_apps = OVERLAY_APPS.get(name, BASE_APPS)
    assert sorted(apps) == sorted(want_apps), f"{name}: workloads {sorted(apps)}"
    learner, learner_config, _ = apps["learner"]
    assert learner["kind"] == "StatefulSet", f"{name}: learner is a {learner['kind']}"
    hosts = int(config_field(learner_config, "hosts") or 1)
    assert learner["spec"]["replicas"] == hosts, \
        f"{name}: learner replicas {learner['spec']['replicas']} but distributed.hosts {hosts}"
    if hosts == 1:
        assert learner["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "checkpoints", \
            f"{name}: learner is not a StatefulSet with a checkpoint volume"
        # The learner's state_dir (jobs, ledger, checkpoints) is that volume, not the read-only root.
        state_dir = config_field(learner_config, "state_dir")
        (container,) = learner["spec"]["template"]["spec"]["containers"]
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts.get(state_dir) == "checkpoints", f"{name}: learner state_dir {state_dir} is not on its volume"
    accounts = {a["metadata"]["name"]: a for a in kinds["ServiceAccount"]}
    for a in accounts.values():
        assert a.get("automountServiceAccountToken") is False, f"{name}: ServiceAccount {a['metadata']['name']}"
    for w, _, _ in apps.values():
        assert w["spec"]["template"]["spec"]["serviceAccountName"] in accounts

    def selects(selector, w):
        labels = dict(w["spec"]["template"]["metadata"]["labels"])
        if w["kind"] == "StatefulSet" and POD_NAME_LABEL in selector:  # One pod of it, if it exists.
            pod = selector[POD_NAME_LABEL]
            index = pod[len(w["metadata"]["name"]) + 1:]
            if pod.startswith(w["metadata"]["name"] + "-") and index.isdigit() and int(index) < w["spec"]["replicas"]:
                labels[POD_NAME_LABEL] = pod
        return all(labels.get(k) == v for k, v in selector.items())

    for s in kinds["Service"]:
        assert s["spec"].get("clusterIP") == "None", f"{name}: Service {s['metadata']['name']} is not headless"
        (w,) = [w for w, _, _ in apps.values() if selects(s["spec"]["selector"], w)]
        names = {p["name"] for p in w["spec"]["template"]["spec"]["containers"][0]["ports"]}
        for p in s["spec"]["ports"]:
            assert p["targetPort"] in names, f"{name}: Service {s['metadata']['name']} port {p['targetPort']}"
    assert "learner" in {s["metadata"]["name"] for s in kinds["Service"]}
    assert learner["spec"]["serviceName"] == ("learner" if hosts == 1 else "learner-group"), \
        f"{name}: learner governed by Service {learner['spec']['serviceName']}"
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

    # GPUs: the GPU overlays give each sandbox worker one and the learner one per rank
    # (distributed.ranks_per_host); cpu-only none, and its sandbox runs the CPU backend.
    gpu_apps = sorted(a for a, (_, _, g) in apps.items() if g)
    sandbox_backend = config_field(apps["sandbox"][1], "backend")
    if name in GPU_OVERLAYS:
        ranks = int(config_field(learner_config, "ranks_per_host") or 1)
        assert gpu_apps == sorted(set(want_apps) - {"actor"}) and apps["sandbox"][2] == 1, gpu_apps
        if "policy-replica" in apps:
            assert apps["policy-replica"][2] == 1, f"{name}: a replica has {apps['policy-replica'][2]} GPUs"
        assert apps["learner"][2] == ranks, f"{name}: learner has {apps['learner'][2]} GPUs for {ranks} ranks"
        assert sandbox_backend in (None, "cuda"), sandbox_backend
        sandbox_spec = apps["sandbox"][0]["spec"]["template"]["spec"]
        assert any(t.get("key") == "nvidia.com/gpu" for t in sandbox_spec.get("tolerations", []))
    else:
        assert gpu_apps == [], f"{name}: GPUs requested by {gpu_apps}"
        assert sandbox_backend == "cpu", f"{name}: sandbox backend {sandbox_backend}"

    if hosts > 1:
        check_group(name, kinds, {a: w for a, (w, _, _) in apps.items()}, learner_config, selects)
    if "policy-replica" in apps:
        check_replicas(name, kinds, apps, selects)
    flows = ops_netpol.allowed_flows(kinds["NetworkPolicy"], {a: w for a, (w, _, _) in apps.items()})
    want = EXPECTED_FLOWS | (GROUP_FLOWS if hosts > 1 else set()) | \
        (REPLICA_FLOWS if "policy-replica" in apps else set())
    assert flows == want, f"{name}: NetworkPolicies allow {sorted(flows)}, want {sorted(want)}"
    dns = ops_netpol.dns_allowed(kinds["NetworkPolicy"], {a: w for a, (w, _, _) in apps.items()})
    assert dns == set(want_apps) - {"sandbox"}, f"{name}: DNS egress for {sorted(dns)}"
    scrapes = ops_netpol.metrics_ingress(kinds["NetworkPolicy"], {a: w for a, (w, _, _) in apps.items()})
    assert scrapes == set(want_apps), f"{name}: monitoring may scrape only {sorted(scrapes)}"
    print(f"{name}: {len(docs)} objects valid for Kubernetes {', '.join(SCHEMA_VERSIONS)}; "
          f"flows {sorted(flows)}; DNS for {sorted(dns)}")
    return apps


def check_group(name, kinds, workloads, config, selects):
    """A multi-host learner group: the StatefulSet, its Services, volume and policies agree with the config."""
    where = f"{name}: learner group"
    learner = workloads["learner"]
    spec = learner["spec"]
    sts = learner["metadata"]["name"]
    # Ranks meet before any is ready: OrderedReady would never start pod 1.
    assert spec["podManagementPolicy"] == "Parallel", f"{where}: podManagementPolicy {spec['podManagementPolicy']}"
    (container,) = spec["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container.get("env", [])}
    flags = [a for a in container["command"] if a.startswith("--set=distributed.host_rank=")]
    assert len(flags) == 1, f"{where}: command {container['command']} sets no single host_rank"
    var = re.fullmatch(r"--set=distributed\.host_rank=\$\(([A-Za-z_][A-Za-z0-9_]*)\)", flags[0])
    assert var and env.get(var.group(1), {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == \
        POD_INDEX_FIELD, f"{where}: {flags[0]} does not come from the pod-index label"
    # The print_config run got the last pod's flags.
    host_rank = int(config_field(config, "host_rank") or 0)
    assert host_rank == spec["replicas"] - 1, f"{where}: last pod's host_rank {host_rank}"

    # Rendezvous: pod 0 through the governing headless Service, which publishes not-ready pods.
    rendezvous = config_field(config, "rendezvous") or ""
    match = re.fullmatch(r"tcp://([a-z0-9-]+)\.([a-z0-9-]+)\.kernelrl\.svc\.cluster\.local:(\d+)", rendezvous)
    assert match, f"{where}: rendezvous {rendezvous!r} is not tcp://POD.SERVICE.kernelrl.svc.cluster.local:PORT"
    pod, service_name, port = match.group(1), match.group(2), int(match.group(3))
    assert pod == sts + "-0", f"{where}: rendezvous on {pod}, but global rank 0 is {sts}-0"
    assert service_name == spec["serviceName"], f"{where}: pod DNS needs the governing Service {spec['serviceName']}"
    services = {s["metadata"]["name"]: s for s in kinds["Service"]}
    group = services.get(service_name)
    assert group, f"{where}: no Service {service_name}"
    assert group["spec"].get("publishNotReadyAddresses") is True, f"{where}: {service_name} hides not-ready pods"
    assert selects(group["spec"]["selector"], learner) and POD_NAME_LABEL not in group["spec"]["selector"], \
        f"{where}: {service_name} does not select every learner pod"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert any(p["port"] == port and ports.get(p["targetPort"]) == port for p in group["spec"]["ports"]), \
        f"{where}: {service_name} has no port {port} to a container port {port}"

    # Clients (actors, the job CLI) reach rank 0 only.
    assert services["learner"]["spec"]["selector"].get(POD_NAME_LABEL) == sts + "-0", \
        f"{where}: Service learner selects {services['learner']['spec']['selector']}, not pod 0 only"

    # state_dir: one ReadWriteMany claim every host mounts, no per-pod template.
    assert not spec.get("volumeClaimTemplates"), f"{where}: per-pod volumeClaimTemplates"
    state_dir = config_field(config, "state_dir")
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    claim = volumes.get(mounts.get(state_dir), {}).get("persistentVolumeClaim", {}).get("claimName")
    claims = {c["metadata"]["name"]: c for c in kinds.get("PersistentVolumeClaim", [])}
    assert claim in claims and "ReadWriteMany" in claims[claim]["spec"]["accessModes"], \
        f"{where}: state_dir {state_dir} is not on a rendered ReadWriteMany claim ({claim})"

    # NCCL picks its ports at run time: learner <-> learner on any TCP port, no one else there.
    def with_nccl_port(app):
        pod = ops_netpol.workload_pod(app, workloads[app])
        pod.ports["nccl"] = (43127, "TCP")
        return pod

    policies = kinds["NetworkPolicy"]
    assert ops_netpol.allows(policies, with_nccl_port("learner"), with_nccl_port("learner"), "nccl"), \
        f"{where}: learner -> learner :43127 denied"
    for other in ("actor", "sandbox"):
        assert not ops_netpol.allows(policies, with_nccl_port(other), with_nccl_port("learner"), "nccl"), \
            f"{where}: {other} -> learner :43127 allowed"
        assert not ops_netpol.allows(policies, with_nccl_port("learner"), with_nccl_port(other), "nccl"), \
            f"{where}: learner -> {other} :43127 allowed"
    print(f"  {where}: {spec['replicas']} hosts, Parallel, host_rank from ${var.group(1)}; rendezvous "
          f"{pod}.{service_name}:{port}; clients to {sts}-0; state_dir on {claim} (ReadWriteMany)")


def check_replicas(name, kinds, apps, selects):
    """Engine replicas in their own pods agree with the learner's remote_replicas and reach it."""
    where = f"{name}: policy replicas"
    w, config, _ = apps["policy-replica"]
    learner, learner_config, _ = apps["learner"]
    spec = w["spec"]
    count = int(config_field(learner_config, "count") or 0)
    assert spec["replicas"] == count == int(config_field(config, "replicas") or 0), \
        f"{where}: {spec['replicas']} pods, learner count {count}, replicas {config_field(config, 'replicas')}"
    assert spec["podManagementPolicy"] == "Parallel", f"{where}: podManagementPolicy {spec['podManagementPolicy']}"
    (container,) = spec["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container.get("env", [])}
    flags = [a for a in container["command"] if a.startswith("--set=index=")]
    var = re.fullmatch(r"--set=index=\$\(([A-Za-z_][A-Za-z0-9_]*)\)", flags[0]) if len(flags) == 1 else None
    assert var and env.get(var.group(1), {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == \
        POD_INDEX_FIELD, f"{where}: the index does not come from the pod-index label ({container['command']})"
    assert int(config_field(config, "index") or 0) == spec["replicas"] - 1, f"{where}: last pod's index"
    # One rendezvous: a Service publishing the not-ready learner-0 on the port the learner declares.
    rendezvous = config_field(config, "rendezvous") or ""
    assert rendezvous == config_field(learner_config, "rendezvous"), f"{where}: rendezvous {rendezvous!r}"
    match = re.fullmatch(r"tcp://([a-z0-9-]+)\.kernelrl\.svc\.cluster\.local:(\d+)", rendezvous)
    assert match, f"{where}: rendezvous {rendezvous!r} is not tcp://SERVICE.kernelrl.svc.cluster.local:PORT"
    services = {s["metadata"]["name"]: s for s in kinds["Service"]}
    sync = services.get(match.group(1))
    assert sync and sync["spec"].get("publishNotReadyAddresses") is True, f"{where}: {match.group(1)} hides not-ready pods"
    assert sync["spec"]["selector"] == {POD_NAME_LABEL: learner["metadata"]["name"] + "-0"}, \
        f"{where}: {match.group(1)} selects {sync['spec']['selector']}"
    learner_ports = {p["name"]: p["containerPort"] for p in learner["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert any(p["port"] == int(match.group(2)) and learner_ports.get(p["targetPort"]) == int(match.group(2))
               for p in sync["spec"]["ports"]), f"{where}: no port {match.group(2)} to the learner's"
    # The actors sample from the replicas.
    addresses = [line.strip() for line in apps["actor"][1].splitlines() if "address" in line]
    assert any("policy-replica.kernelrl.svc.cluster.local:50061" in line for line in addresses), \
        f"{where}: the actors do not sample from the replicas ({addresses})"
    print(f"  {where}: {spec['replicas']} pods, Parallel, index from ${var.group(1)}; rendezvous {match.group(1)}:"
          f"{match.group(2)} (learner-0, not-ready published)")


def check_monitoring(docs, overlay, overlay_docs):
    by_kind = {d["kind"]: d for d in docs}
    monitor = by_kind["ServiceMonitor"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    services = [s for s in overlay_docs if s["kind"] == "Service"]
    scraped = [s for s in services if all(s["metadata"]["labels"].get(k) == v for k, v in selector.items())]
    want = len(OVERLAY_APPS.get(overlay, BASE_APPS))
    assert len(scraped) == want, f"ServiceMonitor selects {len(scraped)} Services on {overlay}, want {want}"
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
    print(f"monitoring on {overlay}: ServiceMonitor scrapes {sorted(s['metadata']['name'] for s in scraped)}; "
          f"{len(alerts)} alerts; dashboard with {len(dashboard['panels'])} panels")


def without_block(text, key):
    """--print_config output without the top-level `key { ... }` message."""
    out, depth = [], 0
    for line in text.splitlines():
        if depth == 0 and line == key + " {":
            depth = 1
        elif depth:
            depth += line.count("{") - line.count("}")
        else:
            out.append(line)
    return "\n".join(out)


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
        overlays, apps = {}, {}
        for name in ("overlays/cpu-only", "overlays/gpu", "overlays/learner-group", "overlays/policy-replicas"):
            overlays[name] = render(kubectl, root, name)
            apps[name] = check_overlay(name, overlays[name], tmp)
        # The group's learner config is the gpu overlay's plus `distributed`.
        group_config, gpu_config = (without_block(apps[n]["learner"][1], "distributed")
                                    for n in ("overlays/learner-group", "overlays/gpu"))
        assert group_config == gpu_config, (
            f"overlays/learner-group: learner config differs from the gpu overlay's beyond `distributed`:\n"
            f"{group_config}\nvs\n{gpu_config}")
        monitoring = render(kubectl, root, "monitoring")
        validate_schemas_monitoring = [d for d in monitoring if not d["apiVersion"].startswith(CRD_GROUPS)]
        for version in SCHEMA_VERSIONS:
            for d in validate_schemas_monitoring:
                kubernetes_validate.validate(d, version, strict=True)
        for name in GPU_OVERLAYS:
            check_monitoring(monitoring, name, overlays[name])
    print("deploy: 5 kustomizations rendered and checked")


if __name__ == "__main__":
    sys.exit(main())
