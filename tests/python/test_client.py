"""The dendro_client package against a real dendrod (see conftest.py)."""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import time

import numpy as np
import pytest
from scipy.cluster.hierarchy import fcluster, is_valid_linkage

from conftest import Dendrod, write_keys_file


def hierarchical_logits(n: int, groups: int, per: int, seed: int):
    """N x K logits of K = groups * per classes with a clear two-level structure."""
    rng = np.random.default_rng(seed)
    k = groups * per
    y = rng.integers(0, k, size=n)
    x = rng.normal(size=(n, k))
    same = (np.arange(k)[None, :] // per) == (y[:, None] // per)
    x += 2.5 * same
    x[np.arange(n), y] += 3.0
    return x.astype(np.float32), y


def blobs(n_per: int, centers: int, dim: int, seed: int, spread: float = 6.0):
    rng = np.random.default_rng(seed)
    means = rng.normal(0, spread, (centers, dim))
    y = np.repeat(np.arange(centers), n_per)
    return (means[y] + rng.normal(0, 1.0, (len(y), dim))).astype(np.float64), y


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """True when two labelings group the items identically."""
    pairs = {}
    back = {}
    for u, v in zip(a.tolist(), b.tolist()):
        if pairs.setdefault(u, v) != v or back.setdefault(v, u) != u:
            return False
    return True


@pytest.fixture(scope="module")
def logits():
    return hierarchical_logits(3000, 4, 5, seed=11)


@pytest.fixture(scope="module")
def l2h_model(client, logits):
    """Model "py_l2h" version 1, fitted from an uploaded dataset."""
    x, y = logits
    ds = client.upload(x, labels=y, name="py-logits")
    assert (ds.rows, ds.cols, ds.has_labels, ds.transient) == (3000, 20, True, False)
    assert ds.id.startswith("ds-") and ds.name == "py-logits"
    seen = []
    job = client.fit_l2h(ds.id, name="py_l2h")
    assert job.id.startswith("job-") and job.state in ("QUEUED", "RUNNING", "SUCCEEDED")
    model = job.wait(progress=lambda j: seen.append((j.state, j.progress)))
    assert seen and seen[-1][0] == "SUCCEEDED"
    progress = [p for _, p in seen]
    assert progress == sorted(progress) and progress[-1] == 1.0
    assert job.done and job.state == "SUCCEEDED" and job.model_version == 1
    return model


def test_health_and_target_forms(client, server):
    from dendro_client import Client, DendroError
    assert client.health() == "SERVING"
    assert client.health("dendro.v1.ModelService") == "SERVING"
    with pytest.raises(DendroError) as err:
        client.health("no.such.Service")
    assert err.value.code == "NOT_FOUND"
    # Any gRPC target: a resolver URI, or a static list spread by round_robin.
    for target in (f"dns:///localhost:{server.port}",
                   f"ipv4:127.0.0.1:{server.port},127.0.0.1:{server.port}"):
        with Client(target) as other:
            assert other.health() == "SERVING"
            assert isinstance(other.datasets(), list)


def test_upload_fit_l2h_and_tree(client, l2h_model, logits):
    x, _ = logits
    m = l2h_model
    assert (m.name, m.version, m.method, m.num_leaves, m.input_dim) == ("py_l2h", 1, "l2h", 20, 20)
    assert m.job_id.startswith("job-") and isinstance(m.metadata, dict)
    tree = m.tree()
    assert tree.num_leaves == 20 and tree.leaf_names is None and tree.point_leaf is None
    z = tree.linkage
    assert z.shape == (19, 4) and z.dtype == np.float64
    assert is_valid_linkage(z, throw=True)
    assert tree.newick.strip().endswith(";")
    doc = tree.to_dict()
    assert doc["num_leaves"] == 20 and len(doc["nodes"]) == 39
    doc["num_leaves"] = -1  # a copy: the tree is unchanged
    assert tree.to_dict()["num_leaves"] == 20
    # The local cut agrees with SciPy's maxclust on every k below L - 1.
    for k in range(1, tree.num_leaves - 1):
        ours = tree.cut(k)
        assert len(set(ours.tolist())) == k and ours[0] == 0
        assert same_partition(ours, fcluster(z, k, criterion="maxclust")), k
    assert len(set(tree.cut(tree.num_leaves).tolist())) == tree.num_leaves
    with pytest.raises(ValueError, match="k must be in"):
        tree.cut(0)
    with_points = m.tree(include_points=True)
    assert (with_points.point_leaf == np.argmax(x, axis=1)).all()


def test_assign_at_a_level_matches_the_local_cut(l2h_model, logits):
    x, _ = logits
    leaves = l2h_model.assign(x[:500])
    assert leaves.shape == (500,) and (leaves == np.argmax(x[:500], axis=1)).all()
    tree = l2h_model.tree()
    for level in (2, 4, 7):
        clusters = l2h_model.assign(x[:500], level=level)
        assert (clusters == tree.cut(level)[leaves]).all(), level
    # Four generating super-classes: the 4-cut groups the leaves by them.
    cut4 = tree.cut(4)
    assert all(len(set(cut4[g * 5:g * 5 + 5].tolist())) == 1 for g in range(4))


def test_assign_splits_large_inputs_into_several_messages(server, logits):
    from dendro_client import Client
    x, _ = logits
    with Client(server.target, max_message_bytes=1 << 20) as small:
        big = np.repeat(x, 6, axis=0)  # 18,000 x 20 float32 = 1.4 MB > 1 MiB
        assert (small.model("py_l2h:1").assign(big) == np.argmax(big, axis=1)).all()


def test_tree_larger_than_a_message(dendrod_path, tmp_path):
    """A tree whose JSON exceeds the server's message limit still downloads."""
    from dendro_client import Client
    server = Dendrod(dendrod_path, tmp_path / "data", ["--max_message_mb", "1"])
    try:
        rng = np.random.default_rng(3)
        x = rng.standard_normal((700_000, 4)).astype(np.float32)  # ~1.4 MB of point_leaf
        with Client(server.target, max_message_bytes=1 << 20) as small:
            model = small.fit_l2h(x, name="wide").wait(progress=False)
            tree = model.tree(include_points=True)
            assert tree.point_leaf.shape == (700_000,)
            assert (tree.point_leaf == np.argmax(x, axis=1)).all()
            assert tree.num_leaves == 4 and tree.linkage.shape == (3, 4)
    finally:
        assert server.stop() == 0


def test_one_shot_fit_leaves_no_datasets(client, logits, tmp_path):
    x, _ = logits
    before = {d.id for d in client.datasets()}
    names = [f"class {i}" for i in range(20)]
    model = client.fit_l2h(x.astype(np.float64), name="py_oneshot", leaf_names=names,
                           aggregation="mean_of_means").wait(progress=False)
    assert model.name == "py_oneshot" and model.method == "l2h"
    assert model.tree().leaf_names == names
    assert "'class 0'" in model.tree().newick
    path = tmp_path / "my logits.npy"
    np.save(path, x[:1000])
    from_file = client.fit_l2h(str(path)).wait(progress=False)
    assert from_file.name == "my_logits"
    assert {d.id for d in client.datasets()} == before


def test_prepared_upload_gives_the_same_tree(client, l2h_model, logits):
    from dendro_client import DendroError
    x, _ = logits
    ds = client.upload(x, name="prepared", transient=True, prepare="l2h")
    model = client.fit_l2h(ds.id, name="py_prepared").wait(progress=False)
    want = l2h_model.tree(include_points=True)
    got = model.tree(include_points=True)
    assert (got.linkage == want.linkage).all()
    assert (got.point_leaf == want.point_leaf).all()
    with pytest.raises(DendroError) as err:
        client.upload(x[:10], prepare="tneb")
    assert err.value.code == "INVALID_ARGUMENT"
    assert 'prepare must be empty or "l2h", got "tneb"' in str(err.value)


def test_model_refs_and_labels(client, l2h_model, logits):
    x, _ = logits
    v2 = client.fit_l2h(l2h_model.dataset_id, name="py_l2h").wait(progress=False)
    assert v2.version == 2
    labelled = client.set_label("py_l2h", "stable", 1)
    assert labelled.version == 1 and "stable" in labelled.labels
    assert client.model("py_l2h@stable").version == 1
    assert client.model("py_l2h:2").version == 2
    assert client.model("py_l2h", 1).version == 1
    assert client.model("py_l2h").version == 2
    assert client.model("py_l2h:latest").version == 2
    versions = [(m.name, m.version) for m in client.models(name="py_l2h")]
    assert sorted(versions) == [("py_l2h", 1), ("py_l2h", 2)]
    assert ("py_l2h", 1) in [(m.name, m.version) for m in client.models()]
    with pytest.raises(ValueError, match="NAME:VERSION or NAME@LABEL"):
        client.model("a:1@b")
    assert client.delete_label("py_l2h", "stable") == 1
    assert client.delete_model("py_l2h", 2) == 1
    assert client.model("py_l2h").version == 1


def test_tneb_and_ghhc_small_fits(client):
    x, y = blobs(80, 3, 4, seed=3)
    ds = client.upload(x, labels=y, name="py-blobs")
    tneb_job = client.fit_tneb(ds.id, name="py_tneb", components=4, restarts=1, seed=1,
                               path_points=20, path_steps=20, eval_points=64,
                               min_component_points=2, diagnose_k=2)
    ghhc_job = client.fit_ghhc(ds, name="py_ghhc", internal_nodes=8, triples=3000,
                               batch_size=100, seed=1)
    tneb = tneb_job.wait(progress=False)
    ghhc = ghhc_job.wait(progress=False)
    assert (tneb.method, ghhc.method) == ("tneb", "ghhc")
    # The diagnostics describe the cut asked for: 2 clusters over every row.
    assert tneb.metadata["diag_k"] == "2"
    assert sum(int(v) for v in tneb.metadata["diag_cluster_sizes"].split(",")) == len(x)
    for model in (tneb, ghhc):
        tree = model.tree()
        assert model.num_leaves == tree.num_leaves >= 2
        if tree.num_leaves > 1:
            assert is_valid_linkage(tree.linkage, throw=True)
        leaves = model.assign(x)
        assert leaves.shape == (len(x),)
        assert ((leaves >= 0) & (leaves < model.num_leaves)).all()
    coarse = ghhc.tree(unrefined=True)
    assert coarse.num_leaves == ghhc.num_leaves
    assert coarse.to_dict()["format"] == "dendro.hierarchy"
    # The tree above the leaf clusters: Ward's by default, the node tree on
    # request; the same fit below it, so the same leaves for every row.
    assert ghhc.metadata["tree"] == "ward"
    nodes = client.fit_ghhc(ds, name="py_ghhc_nodes", internal_nodes=8, triples=3000,
                            batch_size=100, seed=1, tree="nodes").wait(progress=False)
    assert nodes.metadata["tree"] == "nodes"
    assert nodes.num_leaves == ghhc.num_leaves
    assert (nodes.assign(x) == ghhc.assign(x)).all()
    with pytest.raises(Exception, match="tree must be ward or nodes"):
        client.fit_ghhc(ds, name="py_ghhc_bad", tree="single")
    with pytest.raises(ValueError, match="unrefined"):
        coarse.linkage
    assert coarse.reachable_levels()[0] == 1
    # Unknown parameters are refused locally, naming the valid ones.
    with pytest.raises(TypeError, match="components") as err:
        client.fit_tneb(x, name="py_bad", componentz=3)
    assert "componentz" in str(err.value)
    with pytest.raises(TypeError, match="internal_nodes"):
        client.fit_ghhc(x, name="py_bad", nodes=3)


def classifier_data(seed: int, labels_from: int = 50):
    rng = np.random.default_rng(5)
    groups, per, d = 3, 4, 12
    k = groups * per
    means = np.repeat(rng.normal(0, 3.0, (groups, d)), per, axis=0) + rng.normal(0, 1.0, (k, d))
    labels = labels_from + 10 * np.arange(k)

    def sample(n: int, s: int):
        r = np.random.default_rng(s)
        c = np.repeat(np.arange(k), n)
        return (means[c] + r.normal(0, 0.5, (len(c), d))).astype(np.float32), labels[c]

    return sample(50, seed), sample(20, seed + 100), labels


def test_hppca_train_predict_classes_and_add(client):
    (x, y), (xt, yt), labels = classifier_data(1)
    model = client.hppca_train(x, y, "py_clf", superclasses=3, q=4, r=4, seed=2).wait(
        progress=False)
    assert (model.method, model.version, model.num_leaves) == ("hppca", 1, 12)
    classes = model.classes()
    assert list(classes.labels) == list(labels) and classes.num_superclasses == 3
    assert list(classes.train_counts) == [50] * 12
    pred = model.predict(xt, top_k=3)
    assert pred.labels.shape == (len(xt), 3) and pred.scores.shape == (len(xt), 3)
    assert (np.diff(pred.scores, axis=1) >= 0).all()
    assert (pred.labels[:, 0] == yt).mean() > 0.9
    one = model.predict(xt, top_t=1)
    assert one.superclasses.shape == (len(xt), 1)
    super_of = dict(zip(classes.labels.tolist(), classes.superclasses.tolist()))
    assert all(super_of[l] == s for l, s in zip(one.labels[:, 0], one.superclasses[:, 0]))
    flat = model.predict(xt, top_k=2, flat=True)
    assert flat.superclasses.shape == (len(xt), 0) and (flat.labels[:, 0] == yt).mean() > 0.9

    (x2, y2), (xt2, yt2), labels2 = classifier_data(7, labels_from=1000)
    added = client.hppca_add("py_clf", x2, y2).wait(progress=False)
    assert (added.name, added.version) == ("py_clf", 2)
    assert set(added.classes().labels.tolist()) == set(labels.tolist()) | set(labels2.tolist())
    with pytest.raises(ValueError, match="needs labels"):
        client.hppca_train(x, None, "py_clf")


def test_string_labels_name_the_classes(client, tmp_path):
    (x, y), (xt, yt), labels = classifier_data(3)
    names = np.array([f"class_{v}" for v in y])
    model = client.hppca_train(x, names, "py_named", superclasses=3, q=4, r=4, seed=2).wait(
        progress=False)
    classes = model.classes()
    # Sorted names are numbered 0..K-1: the labels are those numbers, the
    # names the strings.
    assert list(classes.labels) == list(range(12))
    assert list(classes.names) == sorted(f"class_{v}" for v in labels)
    pred = model.predict(xt)
    got = np.asarray(classes.names)[pred.labels[:, 0]]
    assert (got == np.array([f"class_{v}" for v in yt])).mean() > 0.9
    # Growing with names: the old classes keep their labels, new ones follow.
    (x2, y2), _, labels2 = classifier_data(8, labels_from=1000)
    path = tmp_path / "new_names.txt"
    path.write_text("\n".join(f"class_{v}" for v in y2) + "\n")
    grown = client.hppca_add("py_named", x2, str(path)).wait(progress=False).classes()
    by_name = dict(zip(grown.names, grown.labels.tolist()))
    assert all(by_name[n] == v for n, v in zip(classes.names, classes.labels.tolist()))
    assert sorted(by_name[f"class_{v}"] for v in labels2) == list(range(12, 24))
    # Integer labels keep their values and are named by their digits.
    (x3, y3), _, _ = classifier_data(4)
    plain = client.hppca_train(x3, y3.astype(np.float64), "py_plain", superclasses=3, q=4, r=4
                               ).wait(progress=False).classes()
    assert list(plain.names) == [str(v) for v in plain.labels]
    with pytest.raises(ValueError, match="fractions"):
        client.hppca_train(x3, y3 + 0.5, "py_plain")


def test_errors_carry_code_message_and_request_id(client, logits):
    from dendro_client import DendroError
    with pytest.raises(DendroError) as err:
        client.model("no_such_model")
    e = err.value
    assert e.code == "NOT_FOUND" and "no_such_model" in e.message
    assert e.request_id and e.request_id in str(e)
    with pytest.raises(DendroError) as err:
        client.job("job-nope")
    assert err.value.code == "NOT_FOUND"
    with pytest.raises(DendroError) as err:
        client.model("py_l2h").predict(logits[0][:2])  # a clustering model does not predict
    assert err.value.code == "FAILED_PRECONDITION"

    before = {d.id for d in client.datasets()}
    x = logits[0][:100].copy()
    x[17, 4] = np.nan
    with pytest.raises(ValueError, match="row 17, column 4"):
        client.upload(x)
    with pytest.raises(ValueError, match="row 17, column 4"):
        client.fit_l2h(x, name="py_nan")
    big = logits[0][:10].astype(np.float64)
    big[3, 2] = 1e300  # finite in float64, not in the float32 sent
    with pytest.raises(ValueError, match="row 3, column 2"):
        client.upload(big)
    assert {d.id for d in client.datasets()} == before


def test_cancel_a_long_ghhc_job(client):
    from dendro_client import DendroError
    x, _ = blobs(100, 3, 4, seed=4)
    job = client.fit_ghhc(x, name="py_long", internal_nodes=20, triples=10**9, seed=1)
    for _ in range(2400):  # a guard against a hang, not a timing check
        if job.refresh().state != "QUEUED":
            break
        time.sleep(0.05)
    assert job.state == "RUNNING"
    job.cancel()
    with pytest.raises(DendroError) as err:
        job.wait(progress=False)
    assert err.value.code == "CANCELLED" and job.state == "CANCELLED"
    assert job.refresh().state == "CANCELLED"
    assert job.id in [j.id for j in client.jobs()]


def test_wait_timeout_and_delete_dataset(client):
    from dendro_client import DendroError
    x, _ = blobs(100, 3, 4, seed=5)
    ds = client.upload(x)
    job = client.fit_ghhc(ds.id, name="py_long2", internal_nodes=20, triples=10**9, seed=1)
    with pytest.raises(DendroError) as err:
        job.wait(progress=False, timeout=0.5)
    assert err.value.code == "DEADLINE_EXCEEDED"
    with pytest.raises(DendroError) as err:
        client.delete_dataset(ds.id)  # the job still uses it
    assert err.value.code == "FAILED_PRECONDITION"
    job.cancel()
    with pytest.raises(DendroError):
        job.wait(progress=False)
    client.delete_dataset(ds.id)
    assert ds.id not in {d.id for d in client.datasets()}


def test_api_key(dendrod_path, tmp_path, monkeypatch):
    from dendro_client import Client, DendroError
    keys = tmp_path / "keys"
    write_keys_file(keys, {"alice": ("alice-key-0123456789abcdef", "writer")})
    server = Dendrod(dendrod_path, tmp_path / "data", ["--auth_keys", str(keys)])
    try:
        monkeypatch.delenv("DENDRO_API_KEY", raising=False)
        with Client(server.target) as anonymous:
            assert anonymous.health() == "SERVING"  # health checks need no key
            with pytest.raises(DendroError) as err:
                anonymous.models()
            assert err.value.code == "UNAUTHENTICATED" and err.value.request_id
        with Client(server.target, api_key="wrong-key-0123456789") as wrong:
            with pytest.raises(DendroError) as err:
                wrong.datasets()
            assert err.value.code == "UNAUTHENTICATED"
        with Client(server.target, api_key="alice-key-0123456789abcdef") as alice:
            x, _ = hierarchical_logits(300, 2, 3, seed=2)
            model = alice.fit_l2h(x, name="keyed").wait(progress=False)
            assert model.owner == "alice" and alice.models()[0].name == "keyed"
        monkeypatch.setenv("DENDRO_API_KEY", "alice-key-0123456789abcdef")
        monkeypatch.setenv("DENDRO_SERVER", server.target)
        with Client() as from_env:
            assert from_env.target == server.target
            assert from_env.model("keyed").version == 1
        with Client(api_key="") as keyless:  # "" overrides the environment
            with pytest.raises(DendroError) as err:
                keyless.models()
            assert err.value.code == "UNAUTHENTICATED"
    finally:
        assert server.stop() == 0


def test_mutual_tls(dendrod_path, tmp_path):
    from dendro_client import Client, DendroError
    if shutil.which("openssl") is None:
        pytest.skip("the openssl binary is not installed (Debian package openssl)")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=tmp_path)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=ca",
            "-keyout", "ca.key", "-out", "ca.pem")
    (tmp_path / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, extra in (("server", ("-extfile", "san.ext")), ("alice", ())):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                "-keyout", f"{name}.key", "-out", f"{name}.csr")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", *extra)
    (tmp_path / "keys").write_text("cn:alice  alice  reader\n")
    t = lambda name: str(tmp_path / name)  # noqa: E731
    server = Dendrod(dendrod_path, tmp_path / "data",
                     ["--tls_cert", t("server.pem"), "--tls_key", t("server.key"),
                      "--tls_client_ca", t("ca.pem"), "--auth_keys", t("keys")])
    try:
        with Client(server.target, tls_ca=t("ca.pem"), tls_cert=t("alice.pem"),
                    tls_key=t("alice.key")) as alice:
            assert alice.models() == []
        with Client(server.target, timeout=5) as plaintext:
            with pytest.raises(DendroError) as err:
                plaintext.models()
            assert err.value.code == "UNAVAILABLE" and server.target in err.value.message
        # TLS without a certificate: told what the server wants.
        with Client(server.target, tls_ca=t("ca.pem"), timeout=5) as no_cert:
            with pytest.raises(DendroError) as err:
                no_cert.models()
            assert err.value.code == "UNAVAILABLE"
            assert "requires a client certificate" in err.value.message, err.value.message
        with pytest.raises(ValueError, match="both or neither"):
            Client(server.target, tls_cert=t("alice.pem"))
    finally:
        assert server.stop() == 0


# --- no server needed ---------------------------------------------------------------


def test_parse_model_ref():
    from dendro_client import parse_model_ref
    assert parse_model_ref("m") == ("m", 0, "")
    assert parse_model_ref("m:3") == ("m", 3, "")
    assert parse_model_ref("m:latest") == ("m", 0, "")
    assert parse_model_ref("m@stable") == ("m", 0, "stable")
    assert parse_model_ref("m", 4) == ("m", 4, "")
    for bad in ("", ":3", "m:0", "m:x", "m@", "m:1@s"):
        with pytest.raises(ValueError):
            parse_model_ref(bad)
    with pytest.raises(ValueError, match="twice"):
        parse_model_ref("m:2", 3)


def test_progress_bar_draws_only_on_interactive_streams():
    from dendro_client import ProgressBar

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    plain = io.StringIO()
    bar = ProgressBar(plain)
    bar.update(0.5, "half")
    bar.close()
    assert plain.getvalue() == ""
    tty = Tty()
    bar = ProgressBar(tty, width=10)
    bar.update(0.5, "half")
    bar.update(1.0, "done")
    bar.close()
    assert tty.getvalue() == ("\r[#####.....]  50.0%  half"
                              "\r[##########] 100.0%  done\n")


def test_tree_cut_on_an_nary_tree():
    from dendro_client import Tree
    # Leaves 0..4; node 5 = {0, 1, 2} at 1.0, node 6 = {3, 4} at 2.0, root 7 = {5, 6} at 3.0.
    nodes = [{"id": v, "parent": p, "height": h, "children": c} for v, p, h, c in [
        (0, 5, 0, []), (1, 5, 0, []), (2, 5, 0, []), (3, 6, 0, []), (4, 6, 0, []),
        (5, 7, 1.0, [0, 1, 2]), (6, 7, 2.0, [3, 4]), (7, -1, 3.0, [5, 6])]]
    tree = Tree({"format": "dendro.hierarchy", "version": 1, "num_leaves": 5, "nodes": nodes})
    assert tree.reachable_levels() == [1, 2, 3, 5] and not tree.is_binary
    assert tree.cut(1).tolist() == [0] * 5
    assert tree.cut(2).tolist() == [0, 0, 0, 1, 1]
    assert tree.cut(3).tolist() == [0, 0, 0, 1, 2]
    assert tree.cut(5).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="nearest reachable counts are 3 and 5"):
        tree.cut(4)
    with pytest.raises(ValueError, match="without a server"):
        tree.newick
    with pytest.raises(ImportError if not _has_matplotlib() else ValueError):
        tree.plot()


def _has_matplotlib() -> bool:
    import importlib.util
    return importlib.util.find_spec("matplotlib") is not None


def test_append_makes_generations_and_fits_use_the_newest(client, logits):
    from dendro_client import DendroError
    x, y = logits
    first = client.upload(x[:1000], labels=y[:1000], name="py-grow")
    assert (first.lineage, first.generation, first.ref) == (first.id, 1, f"{first.id}:1")
    second = client.upload(x[1000:1500], labels=y[1000:1500], append_to=first.id)
    assert second.id != first.id and second.lineage == first.id
    assert (second.generation, second.rows, second.name) == (2, 1500, "py-grow")
    assert client.dataset(first.id).id == second.id
    assert client.dataset(first.ref).id == first.id
    with pytest.raises(DendroError) as err:
        client.upload(x[1500:], labels=y[1500:], append_to=first.ref)
    assert err.value.code == "FAILED_PRECONDITION" and "newest is generation 2" in str(err.value)
    with pytest.raises(DendroError) as err:
        client.upload(x[1500:, :5], labels=y[1500:], append_to=first.id)
    assert err.value.code == "INVALID_ARGUMENT" and "columns" in str(err.value)
    model = client.fit_l2h(first.id, name="py_grown").wait()
    assert model.dataset_id == second.id
    with_points = model.tree(include_points=True)
    assert (with_points.point_leaf == np.argmax(x[:1500], axis=1)).all()


def test_import_file_reads_the_file_in_place(dendrod_path, logits, tmp_path, monkeypatch):
    from dendro_client import Client, DendroError
    x, y = logits
    allowed = tmp_path / "in"
    allowed.mkdir()
    path = allowed / "x.npy"
    np.save(path, x.astype(np.float32))
    monkeypatch.setenv("DENDRO_DENDROD", dendrod_path)
    with Client.local(import_dirs=str(allowed)) as local:
        ds = local.import_file(str(path), labels=y, transient=True)
        assert (ds.rows, ds.cols, ds.name) == (x.shape[0], x.shape[1], "x")
        assert os.stat(path).st_nlink == 2  # linked, not copied
        uploaded = local.upload(x, labels=y)
        a = local.fit_l2h(ds.id, name="imported").wait().tree(include_points=True)
        b = local.fit_l2h(uploaded.id, name="uploaded").wait().tree(include_points=True)
        assert (a.point_leaf == b.point_leaf).all()
        with pytest.raises(DendroError) as err:
            local.import_file(str(tmp_path / "elsewhere.npy"))
        assert err.value.code == "PERMISSION_DENIED"
        np.save(allowed / "x64.npy", x.astype(np.float64))
        with pytest.raises(DendroError) as err:
            local.import_file(str(allowed / "x64.npy"))
        assert err.value.code == "FAILED_PRECONDITION" and "float64" in str(err.value)


def test_diff_compares_two_versions_on_the_server(client, logits):
    from dendro_client import DendroError
    x, y = logits
    client.fit_l2h(client.upload(x[:2000], labels=y[:2000]), name="py_diff").wait()
    client.fit_l2h(client.upload(x, labels=y), name="py_diff").wait()
    report = client.diff("py_diff:1", "py_diff:2", tanglegram=True)
    assert report["format"] == "dendro.diff"
    assert report["shared_leaves"] == report["a"]["leaves"] == report["b"]["leaves"]
    assert report["tanglegram_svg"].lstrip().startswith(("<svg", "<?xml"))
    same = client.diff("py_diff:2", "py_diff")  # the latest is version 2
    assert same["robinson_foulds"]["distance"] == 0
    assert "tanglegram_svg" not in same
    assert same["events"]["list"] and all(e["type"] == "stayed" for e in same["events"]["list"])
    with pytest.raises(DendroError) as err:
        client.diff("py_diff:1", "no_such_model")
    assert err.value.code == "NOT_FOUND"


def test_warm_start_and_stable_ids(client, logits):
    x, y = logits
    first = client.upload(x[:1500], labels=y[:1500], name="py-evolve")
    v1 = client.fit_l2h(first.id, name="py_evolve").wait()
    client.upload(x[1500:], labels=y[1500:], append_to=first.id)
    v2 = client.fit_l2h(first.id, warm_start="py_evolve").wait()  # the name: the warm start's
    assert (v2.name, v2.version) == ("py_evolve", 2)
    assert v2.metadata["warm_start"] == "py_evolve:1"
    assert v2.metadata["warm_start_rows"] == "1500"
    cold = client.fit_l2h(first.id, name="py_evolve_cold").wait()
    assert (v2.tree().linkage == cold.tree().linkage).all()
    # Classes keep their ids; the cut's clusters are named by stable ids.
    assert v2.metadata["stable_ids_basis"] == "leaves"
    leaf1, leaf2 = v1.assign(x, stable_ids=True), v2.assign(x, stable_ids=True)
    assert leaf1.dtype == np.int64 and (leaf1 == leaf2).all()
    ids, plain = v2.assign(x, level=3, stable_ids=True), v2.assign(x, level=3)
    assert len(set(ids)) == 3 and len(set(zip(ids, plain))) == 3
    # The tree names its nodes by the same ids: a leaf's, and the cut's clusters'.
    tree = v2.tree()
    leaves = v2.assign(x)
    assert (tree.stable_ids[leaves] == leaf2).all()
    assert set(ids) <= set(tree.stable_ids.tolist())
    assert v2.tree(unrefined=True).stable_ids is None


def test_tneb_and_ghhc_warm_starts(client):
    x, y = blobs(120, 3, 4, seed=5)
    first = client.upload(x[:300], labels=y[:300], name="py-warm-blobs")
    client.upload(x[300:], labels=y[300:], append_to=first.id)
    fits = {
        "py_warm_tneb": lambda **kw: client.fit_tneb(
            **kw, components=4, restarts=1, seed=1, path_points=20, path_steps=20,
            eval_points=64, min_component_points=2),
        "py_warm_ghhc": lambda **kw: client.fit_ghhc(
            **kw, internal_nodes=8, triples=3000, seed=1, points="fixed"),
    }
    for name, fit in fits.items():
        fit(data=first.id + ":1", name=name).wait(progress=False)
        warm = fit(data=first.id, warm_start=name).wait(progress=False)
        assert (warm.name, warm.version) == (name, 2)
        assert warm.metadata["warm_start"] == name + ":1"
        assert warm.metadata["warm_start_rows"] == "60"
        assert "warm_start_note" not in warm.metadata
        assert len(warm.assign(x)) == len(x)
