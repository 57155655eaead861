#!/usr/bin/python3
"""The kustomize variants in deploy/k8s hold together and say what README promises.

Every directory of deploy/k8s with a kustomization.yaml (base, single,
cluster, cluster-with-postgres, cluster-autoscaling) is rendered with
`kubectl kustomize`, and the rendered objects are checked:
  * every pod passes the "restricted" Pod Security Standard, field by field
    (host namespaces, privileged, capabilities, volume types, host ports,
    AppArmor, SELinux, /proc mount, seccomp, sysctls, privilege escalation,
    non-root), and runs with a read-only root filesystem;
  * every container has startup, readiness and liveness probes (on the
    --health_listen port) and CPU and memory requests and a memory limit;
  * every image is pinned (a registry path and a tag other than latest, from
    a kustomize `images:` entry), dendro's at the CMake project version;
  * the NetworkPolicies let in only the gRPC and console ports, /metrics only
    from the monitoring namespace, and PostgreSQL only from dendrod;
  * the ServiceMonitor selects exactly the headless Service, on the metrics
    port, with the job name deploy/monitoring's rules select;
  * the console has its own Service; the StatefulSet's Service is headless;
  * the autoscaling example scales the Deployment on the queue depth;
  * with the dendrod binary given, every flag in the manifests exists.
kubectl missing (or too old to load directories as resources) skips those
checks with the reason printed; the checks of what each variant is for then
still run on the files, followed by hand. yamllint (deploy_yaml_lint) checks
the syntax. The Dockerfile's defaults are checked too.

Usage: k8s_manifests_test.py DEPLOY_K8S_DIR [DENDROD_BINARY]
"""
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

import yaml

K8S = None
DENDROD = None
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "Pod", "CronJob")
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
# The scrape job deploy/monitoring/dendro-rules.yml selects.
MONITORING_JOB = "dendrod"


def kubectl():
    """(path, None) or (None, why it cannot render the variants)."""
    path = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if path is None or not os.access(path, os.X_OK):
        return None, f"kubectl is not installed ({path or 'not on PATH'})"
    run = subprocess.run([path, "version", "--client", "-o", "json"],
                         capture_output=True, text=True)
    try:
        info = json.loads(run.stdout)
    except ValueError:
        return None, f"`{path} version --client` answered no JSON: {run.stderr.strip()}"
    kustomize = info.get("kustomizeVersion", "")
    if not kustomize or kustomize.startswith("v2"):
        # kubectl before 1.21 embeds kustomize v2.0.3, which takes only
        # files, not directories, as resources.
        return None, (f"{path} (client {info['clientVersion']['gitVersion']}) embeds kustomize "
                      f"{kustomize or 'v2'}; the variants need kustomize v3 or later "
                      "(kubectl 1.21 or later)")
    return path, None


KUBECTL, KUBECTL_MISSING = None, None


def variants():
    return sorted(d for d in os.listdir(K8S)
                  if os.path.isfile(os.path.join(K8S, d, "kustomization.yaml")))


_rendered = {}


def render(variant):
    if variant not in _rendered:
        run = subprocess.run([KUBECTL, "kustomize", os.path.join(K8S, variant)],
                             capture_output=True, text=True)
        if run.returncode != 0:
            raise AssertionError(f"kubectl kustomize {variant}: {run.stderr}")
        _rendered[variant] = [d for d in yaml.safe_load_all(run.stdout) if d]
    return _rendered[variant]


def walk_files(variant):
    """Without kubectl: the objects of a variant's files, followed by hand
    (resources that are files or directories; no images or patches)."""
    def walk(directory):
        with open(os.path.join(directory, "kustomization.yaml")) as f:
            kustomization = yaml.safe_load(f)
        for res in kustomization["resources"]:
            path = os.path.normpath(os.path.join(directory, res))
            if os.path.isdir(path):
                yield from walk(path)
            else:
                with open(path) as f:
                    yield from (d for d in yaml.safe_load_all(f) if d)
    return list(walk(os.path.join(K8S, variant)))


def documents(variant):
    """Every object a variant's kustomization would apply."""
    return render(variant) if KUBECTL else walk_files(variant)


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def dendrod_args(docs):
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet") and d["metadata"]["name"] == "dendrod":
            return d, d["spec"]["template"]["spec"]["containers"][0]
    raise AssertionError("no dendrod workload")


def pod_spec(workload):
    if workload["kind"] == "Pod":
        return workload["spec"]
    if workload["kind"] == "CronJob":
        return workload["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return workload["spec"]["template"]["spec"]


def pod_metadata(workload):
    if workload["kind"] == "Pod":
        return workload["metadata"]
    if workload["kind"] == "CronJob":
        return workload["spec"]["jobTemplate"]["spec"]["template"]["metadata"]
    return workload["spec"]["template"]["metadata"]


def all_containers(spec):
    return (spec.get("initContainers", []) + spec.get("containers", [])
            + spec.get("ephemeralContainers", []))


def flags(container):
    return dict(a[2:].split("=", 1) for a in container.get("args", [])
                if a.startswith("--") and "=" in a)


def listen_port(container, flag):
    value = flags(container).get(flag)
    return int(value.rsplit(":", 1)[1]) if value else None


def container_port(container, name_or_number):
    """The container port a Service targetPort or probe port names."""
    for p in container.get("ports", []):
        if name_or_number in (p.get("name"), p["containerPort"]):
            return p["containerPort"]
    return None


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def cmake_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(dendro VERSION ([0-9.]+)", f.read()).group(1)


class ManifestsTest(unittest.TestCase):
    """What each variant is for (rendered when kubectl can, else from the files)."""

    def test_single_is_one_statefulset_on_sqlite(self):
        docs = documents("single")
        workload, container = dendrod_args(docs)
        self.assertEqual(workload["kind"], "StatefulSet")
        self.assertEqual(workload["spec"]["replicas"], 1)
        self.assertFalse(any(a.startswith("--catalog") for a in container["args"]))

    def test_cluster_is_three_replicas_over_postgres_and_a_shared_volume(self):
        docs = documents("cluster")
        workload, container = dendrod_args(docs)
        self.assertEqual(workload["kind"], "Deployment")
        self.assertEqual(workload["spec"]["replicas"], 3)
        args = container["args"]
        catalog = [a for a in args if a.startswith("--catalog=")]
        self.assertEqual(len(catalog), 1)
        self.assertTrue(catalog[0].startswith("--catalog=postgresql://"))
        self.assertNotIn(":", catalog[0].split("//")[1].split("@")[0], "no password in the URI")
        self.assertIn("--replica_id=$(POD_NAME)", args)
        env = {e["name"]: e for e in container["env"]}
        self.assertEqual(env["PGPASSWORD"]["valueFrom"]["secretKeyRef"]["name"], "dendro-postgres")
        self.assertEqual(env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name")
        headless = [s for s in by_kind(docs, "Service") if s["spec"].get("clusterIP") == "None"]
        self.assertEqual([s["metadata"]["name"] for s in headless], ["dendrod-headless"])
        pvc = by_kind(docs, "PersistentVolumeClaim")
        self.assertEqual([p["spec"]["accessModes"] for p in pvc], [["ReadWriteMany"]])
        claims = [v["persistentVolumeClaim"]["claimName"]
                  for v in workload["spec"]["template"]["spec"]["volumes"]
                  if "persistentVolumeClaim" in v]
        self.assertEqual(claims, [pvc[0]["metadata"]["name"]])
        pdb = by_kind(docs, "PodDisruptionBudget")
        self.assertEqual(len(pdb), 1)
        self.assertEqual(pdb[0]["spec"]["selector"]["matchLabels"],
                         workload["spec"]["selector"]["matchLabels"])

    def test_the_grace_period_covers_the_shutdown_bound(self):
        # dendrod exits within --drain_seconds + --job_stop_seconds + 2 s
        # (kShutdownMargin); Kubernetes kills it at terminationGracePeriodSeconds.
        for variant in ("single", "cluster"):
            with self.subTest(variant):
                workload, container = dendrod_args(documents(variant))
                f = flags(container)
                bound = int(f.get("drain_seconds", 30)) + int(f.get("job_stop_seconds", 10)) + 2
                grace = workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
                self.assertGreaterEqual(grace, bound + 5, f"{variant}: bound {bound} s")

    def test_the_example_database_matches_the_catalogue_uri(self):
        docs = documents("cluster-with-postgres")
        _, container = dendrod_args(docs)
        uri = next(a for a in container["args"] if a.startswith("--catalog="))
        host_port, db = uri.split("@")[1].split("/")
        host, port = host_port.split(":")
        services = {s["metadata"]["name"]: s for s in by_kind(docs, "Service")}
        self.assertIn(host, services)
        self.assertEqual(services[host]["spec"]["ports"][0]["port"], int(port))
        pg = [s for s in by_kind(docs, "StatefulSet") if s["metadata"]["name"] == host][0]
        env = {e["name"]: e for e in pg["spec"]["template"]["spec"]["containers"][0]["env"]}
        self.assertEqual(env["POSTGRES_DB"]["value"], db)
        self.assertEqual(env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"],
                         "dendro-postgres")


class RenderedTest(unittest.TestCase):
    """`kubectl kustomize` output of every variant."""

    @classmethod
    def setUpClass(cls):
        if KUBECTL is None:
            print(f"SKIP RenderedTest: {KUBECTL_MISSING}", file=sys.stderr)
            raise unittest.SkipTest(KUBECTL_MISSING)

    def workloads(self):
        """(variant, workload) for every pod-making object of every variant."""
        out = [(v, d) for v in variants() for d in render(v) if d["kind"] in WORKLOADS]
        self.assertTrue(out)
        return out

    def test_every_variant_renders(self):
        self.assertEqual(set(variants()) >= {"base", "single", "cluster",
                                             "cluster-with-postgres", "cluster-autoscaling"},
                         True, variants())
        for v in variants():
            with self.subTest(v):
                self.assertTrue(render(v))

    def test_restricted_pod_security_standard(self):
        for variant, w in self.workloads():
            spec, meta = pod_spec(w), pod_metadata(w)
            where = f"{variant}: {w['kind']}/{w['metadata']['name']}"
            with self.subTest(where):
                psc = spec.get("securityContext", {})
                # Baseline.
                for host in ("hostNetwork", "hostPID", "hostIPC"):
                    self.assertFalse(spec.get(host, False), host)
                self.assertFalse(psc.get("windowsOptions", {}).get("hostProcess", False))
                for v in spec.get("volumes", []):
                    kinds = set(v) - {"name"}
                    self.assertTrue(kinds <= RESTRICTED_VOLUMES, f"volume {v['name']}: {kinds}")
                for name, value in meta.get("annotations", {}).items():
                    if name.startswith("container.apparmor.security.beta.kubernetes.io/"):
                        self.assertTrue(value == "runtime/default"
                                        or value.startswith("localhost/"), name)
                for sysctl in psc.get("sysctls", []):
                    self.assertIn(sysctl["name"], SAFE_SYSCTLS)
                self.assertIn(psc.get("seLinuxOptions", {}).get("type", ""), SELINUX_TYPES)
                self.assertNotIn("user", psc.get("seLinuxOptions", {}))
                self.assertNotIn("role", psc.get("seLinuxOptions", {}))
                self.assertIn(psc.get("appArmorProfile", {}).get("type", "RuntimeDefault"),
                              ("RuntimeDefault", "Localhost"))
                # Restricted, pod level.
                self.assertNotEqual(psc.get("runAsUser"), 0)
                pod_seccomp = psc.get("seccompProfile", {}).get("type")
                self.assertIn(pod_seccomp, ("RuntimeDefault", "Localhost", None))
                for c in all_containers(spec):
                    csc = c.get("securityContext", {})
                    cwhere = f"container {c['name']}"
                    # Baseline.
                    self.assertFalse(csc.get("privileged", False), cwhere)
                    self.assertFalse(csc.get("windowsOptions", {}).get("hostProcess", False))
                    self.assertIn(csc.get("procMount", "Default"), ("Default",), cwhere)
                    self.assertIn(csc.get("seLinuxOptions", {}).get("type", ""), SELINUX_TYPES)
                    self.assertIn(csc.get("appArmorProfile", {}).get("type", "RuntimeDefault"),
                                  ("RuntimeDefault", "Localhost"))
                    for p in c.get("ports", []):
                        self.assertIn(p.get("hostPort", 0), (0,), f"{cwhere} hostPort")
                    # Restricted.
                    self.assertIs(csc.get("allowPrivilegeEscalation"), False, cwhere)
                    caps = csc.get("capabilities", {})
                    self.assertIn("ALL", caps.get("drop", []), cwhere)
                    self.assertTrue(set(caps.get("add", [])) <= {"NET_BIND_SERVICE"}, cwhere)
                    non_root = csc.get("runAsNonRoot", psc.get("runAsNonRoot"))
                    self.assertIs(non_root, True, f"{cwhere}: runAsNonRoot")
                    self.assertNotEqual(csc.get("runAsUser"), 0, cwhere)
                    seccomp = csc.get("seccompProfile", {}).get("type", pod_seccomp)
                    self.assertIn(seccomp, ("RuntimeDefault", "Localhost"), cwhere)
                    # Beyond the standard: nothing writes the image.
                    self.assertIs(csc.get("readOnlyRootFilesystem"), True, cwhere)

    def test_tmp_is_writable_where_the_root_is_not(self):
        for variant, w in self.workloads():
            spec = pod_spec(w)
            empty = {v["name"] for v in spec.get("volumes", []) if "emptyDir" in v}
            for c in all_containers(spec):
                with self.subTest(f"{variant}: {c['name']}"):
                    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
                    self.assertIn(mounts.get("/tmp"), empty)

    def test_probes_and_resources(self):
        for variant, w in self.workloads():
            for c in all_containers(pod_spec(w)):
                with self.subTest(f"{variant}: {w['metadata']['name']}/{c['name']}"):
                    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                        self.assertTrue(probe in c, f"no {probe}")
                    # The startup probe gives more time than liveness does.
                    s, l = c["startupProbe"], c["livenessProbe"]
                    self.assertGreater(s["periodSeconds"] * s["failureThreshold"],
                                       l["periodSeconds"] * l["failureThreshold"])
                    health = listen_port(c, "health_listen")
                    if c["name"] == "dendrod":
                        self.assertIsNotNone(health, "--health_listen")
                        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                            self.assertEqual(c[probe]["grpc"]["port"], health, probe)
                    r = c.get("resources", {})
                    for key in ("cpu", "memory"):
                        self.assertIn(key, r.get("requests", {}), f"requests.{key}")
                    self.assertIn("memory", r.get("limits", {}), "limits.memory")

    def test_images_are_pinned_by_kustomize(self):
        version = cmake_version()
        for variant, w in self.workloads():
            for c in all_containers(pod_spec(w)):
                with self.subTest(f"{variant}: {c['name']}"):
                    image = c["image"]
                    if "@sha256:" in image:
                        continue  # a digest pins it too
                    name, _, tag = image.rpartition(":")
                    self.assertIn("/", name, f"{image}: no registry or repository path")
                    self.assertTrue(tag and tag != "latest" and "/" not in tag,
                                    f"{image}: no pinned tag")
                    if c["name"] == "dendrod":
                        self.assertEqual(tag, version, "dendro's tag is the project version")
        # ... and they come from `images:` entries, not from the workload files.
        for variant in variants():
            with open(os.path.join(K8S, variant, "kustomization.yaml")) as f:
                k = yaml.safe_load(f)
            for entry in k.get("images", []):
                self.assertTrue(entry.get("newTag") or entry.get("digest"), entry)
        for root, _, files in os.walk(K8S):
            for name in files:
                if name == "kustomization.yaml":
                    continue
                with open(os.path.join(root, name)) as f:
                    for d in yaml.safe_load_all(f):
                        if d and d.get("kind") in WORKLOADS:
                            for c in all_containers(pod_spec(d)):
                                self.assertNotIn(":", c["image"],
                                                 f"{name}: tag {c['image']} outside images:")

    def network_policies(self, docs, app):
        return [p for p in by_kind(docs, "NetworkPolicy")
                if selects(p["spec"]["podSelector"]["matchLabels"], {"app": app})]

    def test_network_policy_lets_in_only_the_api_console_and_monitoring(self):
        for variant in ("single", "cluster", "cluster-with-postgres", "cluster-autoscaling"):
            with self.subTest(variant):
                docs = render(variant)
                _, c = dendrod_args(docs)
                grpc, console, metrics = (listen_port(c, f) for f in
                                          ("listen", "http_listen", "metrics_listen"))
                policies = self.network_policies(docs, "dendrod")
                self.assertEqual(len(policies), 1)
                spec = policies[0]["spec"]
                self.assertIn("Ingress", spec["policyTypes"])
                open_ports, monitoring_ports = set(), set()
                for rule in spec["ingress"]:
                    ports = {container_port(c, p["port"]) for p in rule["ports"]}
                    self.assertNotIn(None, ports, f"a port no container has: {rule['ports']}")
                    for p in rule["ports"]:
                        self.assertEqual(p.get("protocol", "TCP"), "TCP")
                    if "from" not in rule:
                        open_ports |= ports
                    else:
                        self.assertEqual(rule["from"], [{"namespaceSelector": {"matchLabels": {
                            "kubernetes.io/metadata.name": "monitoring"}}}])
                        monitoring_ports |= ports
                self.assertEqual(open_ports, {grpc, console})
                self.assertEqual(monitoring_ports, {metrics})

    def test_postgres_takes_connections_from_dendrod_only(self):
        docs = render("cluster-with-postgres")
        policies = self.network_policies(docs, "dendro-postgres")
        self.assertEqual(len(policies), 1)
        spec = policies[0]["spec"]
        self.assertIn("Ingress", spec["policyTypes"])
        self.assertEqual(spec["ingress"], [{
            "from": [{"podSelector": {"matchLabels": {"app": "dendrod"}}}],
            "ports": [{"protocol": "TCP", "port": 5432}]}])
        _, c = dendrod_args(docs)
        self.assertEqual(dendrod_args(docs)[0]["spec"]["template"]["metadata"]["labels"]["app"],
                         "dendrod")
        self.assertTrue(flags(c)["catalog"].endswith("@dendro-postgres:5432/dendro"))

    def test_service_monitor_scrapes_each_pod_once_as_job_dendrod(self):
        for variant in ("single", "cluster", "cluster-with-postgres", "cluster-autoscaling"):
            with self.subTest(variant):
                docs = render(variant)
                workload, c = dendrod_args(docs)
                monitors = by_kind(docs, "ServiceMonitor")
                self.assertEqual(len(monitors), 1)
                sm = monitors[0]
                self.assertEqual(sm["apiVersion"], "monitoring.coreos.com/v1")
                chosen = [s for s in by_kind(docs, "Service")
                          if selects(sm["spec"]["selector"]["matchLabels"],
                                     s["metadata"].get("labels", {}))]
                self.assertEqual(len(chosen), 1, "one Service, so each pod is scraped once")
                service = chosen[0]
                self.assertTrue(selects(service["spec"]["selector"],
                                        workload["spec"]["template"]["metadata"]["labels"]))
                self.assertEqual(service["metadata"]["labels"][sm["spec"]["jobLabel"]],
                                 MONITORING_JOB)
                self.assertEqual(len(sm["spec"]["endpoints"]), 1)
                endpoint = sm["spec"]["endpoints"][0]
                self.assertEqual(endpoint.get("path", "/metrics"), "/metrics")
                port = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
                self.assertEqual(len(port), 1)
                self.assertEqual(container_port(c, port[0]["targetPort"]),
                                 listen_port(c, "metrics_listen"))

    def test_console_has_its_own_service(self):
        for variant in ("single", "cluster"):
            with self.subTest(variant):
                docs = render(variant)
                _, c = dendrod_args(docs)
                console = listen_port(c, "http_listen")
                self.assertIsNotNone(console, "--http_listen")
                services = [s for s in by_kind(docs, "Service")
                            if any(container_port(c, p["targetPort"]) == console
                                   for p in s["spec"]["ports"])]
                self.assertEqual([s["metadata"]["name"] for s in services], ["dendrod-console"])
                self.assertEqual(len(services[0]["spec"]["ports"]), 1)
                self.assertNotEqual(services[0]["spec"].get("clusterIP"), "None")

    def test_statefulsets_name_a_headless_service(self):
        for variant in variants():
            docs = render(variant)
            services = {s["metadata"]["name"]: s for s in by_kind(docs, "Service")}
            for sts in by_kind(docs, "StatefulSet"):
                with self.subTest(f"{variant}: {sts['metadata']['name']}"):
                    name = sts["spec"]["serviceName"]
                    self.assertIn(name, services)
                    if sts["metadata"]["name"] == "dendrod":
                        self.assertEqual(services[name]["spec"].get("clusterIP"), "None")

    def test_autoscaling_example_scales_the_deployment_on_queue_depth(self):
        docs = render("cluster-autoscaling")
        workload, _ = dendrod_args(docs)
        hpas = by_kind(docs, "HorizontalPodAutoscaler")
        self.assertEqual(len(hpas), 1)
        hpa = hpas[0]
        self.assertEqual(hpa["apiVersion"], "autoscaling/v2")
        ref = hpa["spec"]["scaleTargetRef"]
        self.assertEqual((ref["kind"], ref["name"]), (workload["kind"], "dendrod"))
        self.assertNotIn("replicas", workload["spec"], "the HPA owns the replica count")
        self.assertLessEqual(hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"])
        metrics = hpa["spec"]["metrics"]
        self.assertEqual(len(metrics), 1)
        kind = metrics[0]["type"]
        self.assertIn(kind, ("External", "Pods"))
        self.assertEqual(metrics[0][kind.lower()]["metric"]["name"], "dendro_job_queue_depth")

    def test_every_flag_exists(self):
        if DENDROD in (None, "-"):
            self.skipTest("no dendrod binary given")
        run = subprocess.run([DENDROD, "--help"], capture_output=True, text=True)
        known = set(re.findall(r"^\s*--(\w+)", run.stdout + run.stderr, re.M))
        self.assertIn("listen", known)
        for variant, w in self.workloads():
            for c in all_containers(pod_spec(w)):
                if c["name"] != "dendrod":
                    continue
                for a in c["args"]:
                    with self.subTest(f"{variant}: {a}"):
                        self.assertIn(a[2:].split("=", 1)[0], known)


class DockerfileTest(unittest.TestCase):
    def instruction(self, text, name):
        m = re.search(rf"^{name} (\[.*\])\s*$", text, re.M)
        self.assertIsNotNone(m, name)
        return json.loads(m.group(1))

    def test_the_default_command_serves_metrics_and_tls(self):
        with open(os.path.join(ROOT, "Dockerfile")) as f:
            text = re.sub(r"\\\n\s*", " ", f.read())  # continuation lines joined
        command = self.instruction(text, "ENTRYPOINT") + self.instruction(text, "CMD")
        self.assertEqual(command[0], "dendrod")
        self.assertIn("--metrics_listen", command)
        self.assertIn("--health_listen", command)
        self.assertIn("--tls_cert", command)
        self.assertIn("--tls_key", command)
        exposed = set(re.search(r"^EXPOSE (.*)$", text, re.M).group(1).split())
        for flag in ("--listen", "--metrics_listen"):
            self.assertIn(command[command.index(flag) + 1].rsplit(":", 1)[1], exposed, flag)

    def test_examples_that_send_keys_over_a_network_use_tls(self):
        # Every `docker run` line that mounts keys also serves TLS: it passes
        # --tls_cert or mounts the certificate the default command reads (in
        # the Dockerfile and README).
        for path in ("Dockerfile", "README.md"):
            with open(os.path.join(ROOT, path)) as f:
                lines = f.read().replace("\\\n", " ").splitlines()
            for line in lines:
                if "docker run" in line and "/etc/dendro/keys" in line:
                    with self.subTest(f"{path}: {line.strip()}"):
                        self.assertTrue("--tls_cert" in line or "/etc/dendro/tls" in line)


if __name__ == "__main__":
    K8S = sys.argv.pop(1)
    if len(sys.argv) > 1 and (os.path.isfile(sys.argv[1]) or sys.argv[1] == "-"):
        DENDROD = sys.argv.pop(1)
    KUBECTL, KUBECTL_MISSING = kubectl()
    if KUBECTL_MISSING:
        print(f"k8s_manifests_test: {KUBECTL_MISSING}: rendering checks skipped",
              file=sys.stderr)
    unittest.main(verbosity=2)
