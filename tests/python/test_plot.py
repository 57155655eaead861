"""Tree.plot() draws a real dendrod-fitted tree with matplotlib (Agg backend).

matplotlib is Debian's python3-matplotlib, listed in deploy/packages.txt for
the tests, so this test needs it rather than skipping without it.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest
from scipy.cluster.hierarchy import leaves_list

import matplotlib

matplotlib.use("Agg")
import matplotlib.image  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

from test_client import hierarchical_logits  # noqa: E402

GROUPS, PER = 3, 4  # 12 classes in 3 super-classes


@pytest.fixture(scope="module")
def named_tree(client):
    x, _ = hierarchical_logits(1200, GROUPS, PER, seed=5)
    names = [f"class {i}" for i in range(GROUPS * PER)]
    model = client.fit_l2h(x, name="py_plot", leaf_names=names).wait(progress=False)
    return model.tree(), names


def test_plot_draws_every_leaf_and_merge(named_tree, tmp_path):
    tree, names = named_tree
    k = GROUPS * PER
    fig, ax = plt.subplots(figsize=(6, 4))
    drawn = tree.plot(ax=ax)
    # SciPy's dendrogram dict for this tree: every leaf once, one U per merge,
    # in the linkage's own leaf order, labelled with the model's leaf names.
    assert sorted(drawn["leaves"]) == list(range(k))
    assert drawn["leaves"] == leaves_list(tree.linkage).tolist()
    assert drawn["ivl"] == [names[i] for i in drawn["leaves"]]
    assert len(drawn["icoord"]) == len(drawn["dcoord"]) == k - 1
    assert max(max(d) for d in drawn["dcoord"]) == pytest.approx(tree.linkage[:, 2].max())
    # ... and it is on the axes: one tick label per leaf, one line per merge.
    fig.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == drawn["ivl"]
    assert len(ax.lines) + sum(len(c.get_paths()) for c in ax.collections) >= k - 1
    png = tmp_path / "tree.png"
    fig.savefig(png, dpi=80)
    plt.close(fig)
    assert png.stat().st_size > 1000
    pixels = matplotlib.image.imread(png)
    assert pixels.shape[:2] == (320, 480)
    # Not a blank canvas: the dendrogram's strokes differ from the background.
    assert (np.abs(pixels[..., :3] - pixels[0, 0, :3]).sum(axis=-1) > 0.1).mean() > 0.005


def test_plot_passes_options_to_scipy(named_tree):
    tree, _ = named_tree
    fig, ax = plt.subplots()
    own = [f"L{i}" for i in range(tree.num_leaves)]
    drawn = tree.plot(ax=ax, labels=own, truncate_mode="lastp", p=GROUPS)
    assert len(drawn["ivl"]) == GROUPS  # the top 3 clusters only
    # A cluster of n > 1 leaves is labelled "(n)", a single leaf by its label.
    sizes = [int(label[1:-1]) if label.startswith("(") else 1 for label in drawn["ivl"]]
    assert sum(sizes) == tree.num_leaves and max(sizes) > 1
    plt.close(fig)
    fig, ax = plt.subplots()
    assert tree.plot(ax=ax, labels=own)["ivl"] == [own[i] for i in leaves_list(tree.linkage)]
    plt.close(fig)


def test_plot_without_matplotlib_says_what_to_install(named_tree, monkeypatch):
    tree, _ = named_tree
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match="python3-matplotlib"):
        tree.plot()


def test_plot_truncates_large_trees_like_scipy_lastp(client):
    x, _ = hierarchical_logits(1500, 10, 10, seed=7)  # 100 leaf classes
    tree = client.fit_l2h(x, name="py_plot_large").wait(progress=False).tree()
    assert tree.num_leaves == 100
    fig, ax = plt.subplots()
    drawn = tree.plot(ax=ax)  # > 60 leaves: the last 30 clusters only
    assert len(drawn["ivl"]) == 30
    sizes = [int(label[1:-1]) if label.startswith("(") else 1 for label in drawn["ivl"]]
    assert sum(sizes) == 100
    fig.canvas.draw()
    assert len(ax.get_xticklabels()) == 30
    plt.close(fig)
    fig, ax = plt.subplots()
    assert len(tree.plot(ax=ax, p=12)["ivl"]) == 12
    plt.close(fig)
    fig, ax = plt.subplots()
    assert len(tree.plot(ax=ax, truncate_mode=None)["ivl"]) == 100  # the whole tree
    plt.close(fig)
    fig, ax = plt.subplots()
    assert len(tree.plot(ax=ax, truncate_above=200)["ivl"]) == 100
    plt.close(fig)
