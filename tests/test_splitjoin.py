"""SplitJoin without MPI: the punctuation merge against a literal reading of the paper's Merger
(Algorithm 5), and the whole graph (router, cores, distributors, combiner) driven by
sim.simulate_strategy, random delivery order across links: equal to the oracle for 1 to 6
cores, fanouts 2 and 3, both window kinds, every predicate kind (all pairs of these values,
pairwise.py, not every combination), and written in the promised order."""

import numpy as np
import pytest

from mpi_join.join.oracle import run_oracle
from mpi_join.storage.results import result_dtype
from mpi_join.splitjoin import rap
from mpi_join.splitjoin.graph import split_tree
from mpi_join.storage.verify import order_violations
from conftest import random_streams
from reference import as_set
from pairwise import all_pairs
from sim import SIM_PRED, SIM_WINDOWS, sim_job, simulate_strategy

STRATEGY = "splitjoin"   # whose time budget these tests count against (conftest.py)

PRED, WINDOWS = SIM_PRED, SIM_WINDOWS


def _job(pred, kind):
    return sim_job("splitjoin", pred, kind)


# -- the Merger ---------------------------------------------------------------------------------
def algorithm5(flows):
    """The paper's Merger read literally: take the next group (the least next star of any input);
    read each input that has a star for it until that star, in input order; emit one star. Then
    the rows after each input's last star."""
    pos, nxt, rows, stars = [0] * len(flows), [0] * len(flows), [], []
    while True:
        heads = [(int(f[1]["key"][nxt[j]]), int(f[1]["sub"][nxt[j]])) for j, f in enumerate(flows)
                 if nxt[j] < len(f[1])]
        if not heads:
            break
        g = min(heads)
        for j, (r, st) in enumerate(flows):
            if nxt[j] < len(st) and (int(st["key"][nxt[j]]), int(st["sub"][nxt[j]])) == g:
                rows.append(r[pos[j]:st["end"][nxt[j]]])
                pos[j] = int(st["end"][nxt[j]])
                nxt[j] += 1
        stars.append((sum(len(x) for x in rows), *g))
    for j, (r, _) in enumerate(flows):
        rows.append(r[pos[j]:])
    return np.concatenate(rows), stars


def _random_flow(rng, keys):
    """Rows in groups of the given (key, sub) (some empty), some rows after the last star."""
    dt = result_dtype(["R", "S"])
    parts, st, n = [], [], 0
    for key, sub in keys:
        m = int(rng.integers(0, 4))
        r = np.zeros(m, dt)
        r["R_seq"] = key
        r["S_seq"] = rng.integers(0, 1000, m)
        parts.append(r)
        n += m
        st.append((n, key, sub, key))
    tail = np.zeros(int(rng.integers(0, 3)), dt)
    tail["R_seq"] = -1
    stars = np.array(st, rap.STAR) if st else rap.no_stars()
    return np.concatenate(parts + [tail]), stars


@pytest.mark.parametrize("seed", range(30))
def test_merge_reads_each_input_until_its_star(seed):
    rng = np.random.default_rng(seed)
    groups = sorted({(int(k), int(s)) for k, s in rng.integers(0, 6, (12, 2))})
    flows = [_random_flow(rng, [g for g in groups if rng.random() < 0.7]) for _ in range(int(rng.integers(1, 5)))]
    rows, st = rap.merge(flows)
    want_rows, want_st = algorithm5(flows)
    assert rows.tobytes() == want_rows.tobytes()
    assert [(int(e), int(k), int(s)) for e, k, s in zip(st["end"], st["key"], st["sub"])] == want_st


def test_combine_orders_groups_by_the_seq_that_closed_them():
    dt = result_dtype(["R", "S"])
    r_rows, s_rows = np.zeros(3, dt), np.zeros(2, dt)
    r_rows["R_seq"], s_rows["S_seq"] = [2, 2, 7], [5, 9]
    r_st = np.array([(2, 0, 0, 2), (3, 1, 0, 7)], rap.STAR)
    s_st = np.array([(1, 0, 0, 5), (2, 1, 0, 9)], rap.STAR)
    rows, st, flags = rap.combine((r_rows, r_st), (s_rows, s_st))
    assert np.maximum(rows["R_seq"], rows["S_seq"]).tolist() == [2, 2, 5, 7, 9]
    assert st["seq"].tolist() == [2, 5, 7, 9] and flags.tolist() == [0, 1, 0, 1]
    assert st["end"].tolist() == [2, 3, 4, 5]


# -- the graph ----------------------------------------------------------------------------------
@pytest.mark.parametrize("k,b", [(1, 2), (3, 2), (6, 2), (4, 3), (9, 3)])
def test_tree_layout(k, b):
    t = split_tree(k + 2, b)
    cores = list(range(1, k + 1))

    def children(r):
        return t.downstream(r, "input")

    def position(r):
        v = t.vertex(r)
        assert v.count == k and v.group == "cores"
        return v.index
    assert sorted(position(r) for r in cores) == list(range(k))
    assert len(children(0)) == min(b, k)                    # the fanout fills before the tree deepens
    for r in cores:                                         # a subtree holds consecutive positions
        sub, todo = [], [r]
        while todo:
            x = todo.pop()
            sub.append(position(x))
            todo += children(x)
        assert sorted(sub) == list(range(position(r), position(r) + len(sub)))
        assert t.role(r) == ("distributor" if children(r) else "core")
        parent, = t.upstream(r, "input")
        up, = t.downstream(r, "rap")
        assert up == (parent if parent else k + 1)                 # results go back up the same edges
        assert t.first(r, parent) == children(r)                   # a distributor forwards before it joins
        assert t.upstream(r) == [parent] + children(r)
    assert t.role(k + 1) == "combiner" and t.upstream(k + 1) == children(0)


def _trigger_order(got):
    return order_violations(got, "outer"), order_violations(got, "inner")


@pytest.mark.parametrize("pred,kind,tree,batch", all_pairs(PRED, WINDOWS, [(1, 2), (2, 2), (3, 3), (4, 2), (6, 2), (6, 3)],
                                                            [1, 5]),
                         ids=lambda v: f"{v[0]}x{v[1]}" if isinstance(v, tuple) else None)
def test_splitjoin_equals_oracle_in_strict_outer_order(pred, kind, tree, batch):
    """k cores at fanout b; batches of one tuple joined by a scan, or of five by the index."""
    (k, b), job = tree, _job(pred, kind)
    arrays = random_streams(np.random.default_rng(k * 7 + b), 200, key_range=8)
    expect = run_oracle(job, arrays)
    got, _, _ = simulate_strategy("splitjoin", job, arrays, k + 1, seed=k + 10 * (batch > 1), batch_size=batch,
                                  fanout=b, local_join="scan" if batch == 1 else "index")
    assert len(expect) and len(got) == len(as_set(got)) and as_set(got) == as_set(expect)
    assert order_violations(got, "outer") == 0


@pytest.mark.parametrize("kind", list(WINDOWS))
@pytest.mark.parametrize("mode,interval", [("comparisons", 1), ("comparisons", 3), ("tuples", 4), ("none", 1)])
def test_other_punctuation_modes_give_the_full_result(kind, mode, interval):
    job = _job("band", kind)
    arrays = random_streams(np.random.default_rng(5), 500, key_range=8)
    expect = run_oracle(job, arrays)
    got, mods, _ = simulate_strategy("splitjoin", job, arrays, 5, seed=3, batch_size=6, fanout=2,
                                     punctuation=mode, interval=interval)
    assert len(got) == len(as_set(got)) and as_set(got) == as_set(expect)
    if (mode, interval) == ("comparisons", 1):
        assert order_violations(got, "inner") == 0          # strict inner order
    stars = mods[5].stats()
    assert (stars["stars_r"] + stars["stars_s"] > 0) == (mode != "none")


def test_order_check_can_fail():
    got = np.array([[3, 4], [1, 2], [5, 6]], np.int64)      # triggers 4, 2, 6: out of order
    assert order_violations(got, "outer") == 1
    inner = np.array([[3, 5], [1, 5], [4, 6]], np.int64)    # same trigger 5, stored 3 then 1
    assert order_violations(inner, "outer") == 0 and order_violations(inner, "inner") == 1


def test_explain_says_which_ranks_distribute_merge_and_store(tmp_path):
    from mpi_join.config import load_job
    from mpi_join.tools.plan import explain
    from mpi_join.tools.workloads import make
    job = load_job(make("band", str(tmp_path), tuples=400, strategy="splitjoin"))
    out = "\n".join(explain(job, 8))
    assert "what the ranks do (splitjoin):" in out
    assert "fanout 2, depth 2, 6 join cores" in out
    assert "rank 1: distributor + join core + merger: passes input on to 3, 4" in out
    assert "rank 3: join core; position 1 (stores tuples whose count mod 6 is 1); results to rank 1" in out
    assert "rank 7: combiner + sink" in out


def test_bench_model_counts_hops_and_fits_delays():
    from mpi_join.splitjoin.bench_cores import fit_delay, hops, rank_costs
    from mpi_join.splitjoin.graph import depth
    assert [depth(k, 2) for k in (1, 2, 3, 6, 7, 14)] == [1, 1, 2, 2, 3, 3]
    assert [depth(k, 3) for k in (3, 4, 12, 13)] == [1, 2, 2, 3]
    assert hops("splitjoin", 6, 2) == 4 and hops("handshake", 6) == 6 and hops("llhj", 6) == 1
    a, h = fit_delay([(k, 0.002 + 0.003 * 2 * depth(k, 2)) for k in (1, 2, 3, 4, 7)], "splitjoin", 2)
    assert abs(a - 0.002) < 1e-9 and abs(h - 0.003) < 1e-9
    assert fit_delay([(1, 0.007), (3, 0.009)], "llhj", 2) == (0.008, 0.0)      # one hop: a mean
    summary = {"tuples": 1000, "ranks": [{"rank": 0, "role": "driver", "cpu_s": 0.002},
                                         {"rank": 1, "role": "core", "cpu_s": 0.010},
                                         {"rank": 2, "role": "combiner", "cpu_s": 0.001}]}
    d, t0, e = rank_costs(summary, 4e-6)
    assert abs(d - 2e-6) < 1e-12 and abs(t0 - 6e-6) < 1e-12 and abs(e - 1e-6) < 1e-12
