#!/usr/bin/python3
"""The kustomize variants in deploy/k8s hold together and say what README promises.

kubectl is not a Debian package, so this renders nothing: it follows each
kustomization's resources (files, or directories with their own
kustomization.yaml), parses every document, and checks the properties the
variants exist for. yamllint (deploy_yaml_lint) checks the syntax.

Usage: k8s_manifests_test.py DEPLOY_K8S_DIR
"""
import os
import sys
import unittest

import yaml

K8S = None


def documents(variant):
    """Every object a variant's kustomization would apply."""
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


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def dendrod_args(docs):
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet") and d["metadata"]["name"] == "dendrod":
            return d, d["spec"]["template"]["spec"]["containers"][0]
    raise AssertionError("no dendrod workload")


class ManifestsTest(unittest.TestCase):
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
                flags = dict(a[2:].split("=", 1) for a in container["args"]
                             if a.startswith("--") and "=" in a)
                bound = int(flags.get("drain_seconds", 30)) + \
                    int(flags.get("job_stop_seconds", 10)) + 2
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


if __name__ == "__main__":
    K8S = sys.argv.pop(1)
    unittest.main(verbosity=2)
