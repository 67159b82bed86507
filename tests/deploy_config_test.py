"""Every Kubernetes manifest in deploy/ agrees with the binary it runs.

For each ConfigMap + Deployment pair: the binary accepts the config
(`--print_config` exits 0), the probe and container ports are the config's
ports, and terminationGracePeriodSeconds covers drain + grace + 5 s.
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

import yaml


def field(text, name):
    match = re.search(r"\b%s:\s*([0-9.]+)" % name, text)
    return float(match.group(1)) if match else 0.0


def check(path, tmp):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    configs = {d["metadata"]["name"]: d["data"]["config.textproto"] for d in docs if d["kind"] == "ConfigMap"}
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    assert deployments, f"{path}: no Deployment"
    for dep in deployments:
        spec = dep["spec"]["template"]["spec"]
        container = spec["containers"][0]
        config_name = spec["volumes"][0]["configMap"]["name"]
        text = configs[config_name]
        binary = container["command"][0].replace("/opt/kernelrl/", "")
        config_file = os.path.join(tmp, config_name + ".textproto")
        with open(config_file, "w") as f:
            f.write(text)
        run = subprocess.run([binary, "--config=" + config_file, "--print_config"], capture_output=True, text=True)
        assert run.returncode == 0, f"{path}: {binary} rejects its ConfigMap: {run.stderr.strip()}"
        effective = run.stdout
        grpc_port, metrics_port = int(field(effective, "grpc_port")), int(field(effective, "metrics_port"))
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"grpc": grpc_port, "metrics": metrics_port}, f"{path}: ports {ports} vs config"
        assert container["readinessProbe"]["grpc"]["port"] == grpc_port, f"{path}: readiness probe port"
        assert container["livenessProbe"]["tcpSocket"]["port"] == metrics_port, f"{path}: liveness probe port"
        need = field(effective, "drain_seconds") + field(effective, "grace_seconds") + 5
        assert spec["terminationGracePeriodSeconds"] >= need, f"{path}: grace period below drain + grace + 5 = {need}"
        annotations = dep["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/port"] == str(metrics_port), f"{path}: scrape port"
        print(f"{path}: {binary} accepts its config; ports {grpc_port}/{metrics_port}; grace ok")


def main():
    manifests = sorted(p for p in glob.glob("deploy/*.yaml") if not p.endswith(("kustomization.yaml", "namespace.yaml")))
    assert len(manifests) == 4, manifests
    listed = yaml.safe_load(open("deploy/kustomization.yaml"))["resources"]
    for path in manifests:
        assert os.path.basename(path) in listed, f"{path} missing from kustomization.yaml"
    with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as tmp:
        for path in manifests:
            check(path, tmp)
    print(f"{len(manifests)} manifests checked")


if __name__ == "__main__":
    sys.exit(main())
