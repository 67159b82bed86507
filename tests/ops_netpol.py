"""NetworkPolicy semantics (networking.k8s.io/v1) for the subset deploy/ uses.

A pod is isolated for a direction once any policy with that policyType selects it;
an isolated pod allows only what some selecting policy's rules allow. A connection
needs the source's egress and the destination's ingress to allow it. Peers are
podSelector (the policy's namespace), namespaceSelector, or both (AND); selectors
are matchLabels plus matchExpressions In / NotIn / Exists / DoesNotExist. Ports
are numbers or container port names; omitted ports or peers mean all.

Pods outside the namespace (cluster DNS, Prometheus) are modelled as peers whose
own policies are not ours to check.
"""

NAMESPACE = "kernelrl"


class Pod:
    def __init__(self, name, labels, namespace_labels, ports):
        self.name = name
        self.labels = labels
        self.namespace_labels = namespace_labels
        self.ports = ports  # {name: (number, protocol)}

    @property
    def in_namespace(self):
        return self.namespace_labels.get("kubernetes.io/metadata.name") == NAMESPACE


def workload_pod(name, workload):
    container = workload["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: (p["containerPort"], p.get("protocol", "TCP")) for p in container["ports"]}
    return Pod(name, workload["spec"]["template"]["metadata"]["labels"],
               {"kubernetes.io/metadata.name": NAMESPACE}, ports)


DNS = Pod("kube-dns", {"k8s-app": "kube-dns"}, {"kubernetes.io/metadata.name": "kube-system"},
          {"dns": (53, "UDP"), "dns-tcp": (53, "TCP")})
PROMETHEUS = Pod("prometheus", {"app.kubernetes.io/name": "prometheus"},
                 {"kubernetes.io/metadata.name": "monitoring"}, {})


def matches(selector, labels):
    if selector is None:
        return True
    for k, v in selector.get("matchLabels", {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions", []):
        key, op, values = e["key"], e["operator"], e.get("values", [])
        ok = {"In": lambda: labels.get(key) in values,
              "NotIn": lambda: labels.get(key) not in values,
              "Exists": lambda: key in labels,
              "DoesNotExist": lambda: key not in labels}[op]()
        if not ok:
            return False
    return True


def peer_matches(peer, pod):
    if "ipBlock" in peer:
        return False  # deploy/ uses none; an ipBlock never names a pod here.
    if "namespaceSelector" in peer:
        if not matches(peer["namespaceSelector"], pod.namespace_labels):
            return False
    elif not pod.in_namespace:
        return False
    return matches(peer.get("podSelector"), pod.labels)


def port_matches(rule_ports, dst, port_name):
    if not rule_ports:
        return True
    number, protocol = dst.ports[port_name]
    for p in rule_ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        want = p.get("port")
        if want is None or want == number or want == port_name:
            return True
    return False


def direction_allows(policies, kind, subject, peer, dst, port_name):
    """Whether policies of `kind` ("Ingress"/"Egress") on `subject` let `peer` through."""
    if not subject.in_namespace:
        return True
    selecting = [p for p in policies
                 if kind in p["spec"].get("policyTypes", ["Ingress"]) and matches(p["spec"]["podSelector"], subject.labels)]
    if not selecting:
        return True
    field, peers_field = ("ingress", "from") if kind == "Ingress" else ("egress", "to")
    for p in selecting:
        for rule in p["spec"].get(field, []):
            peers = rule.get(peers_field)
            if (not peers or any(peer_matches(x, peer) for x in peers)) and port_matches(rule.get("ports"), dst,
                                                                                            port_name):
                return True
    return False


def allows(policies, src, dst, port_name):
    return (direction_allows(policies, "Egress", src, dst, dst, port_name) and
            direction_allows(policies, "Ingress", dst, src, dst, port_name))


def allowed_flows(policies, workloads):
    """{(src, dst, port number)} allowed between the workloads' pods."""
    pods = {n: workload_pod(n, w) for n, w in workloads.items()}
    flows = set()
    for src in pods.values():
        for dst in pods.values():
            for port_name, (number, _) in dst.ports.items():
                if allows(policies, src, dst, port_name):
                    flows.add((src.name, dst.name, number))
    return flows


def dns_allowed(policies, workloads):
    """Workloads that may resolve names (UDP and TCP 53 to cluster DNS)."""
    pods = [workload_pod(n, w) for n, w in workloads.items()]
    return {p.name for p in pods if allows(policies, p, DNS, "dns") and allows(policies, p, DNS, "dns-tcp")}


def metrics_ingress(policies, workloads):
    """Workloads whose metrics port Prometheus (namespace monitoring) may scrape."""
    pods = [workload_pod(n, w) for n, w in workloads.items()]
    return {p.name for p in pods if direction_allows(policies, "Ingress", p, PROMETHEUS, p, "metrics")}
