"""“Why this number”, the arithmetic: one estimator's explanation of the credit of a set of
steps sharing (s, a) (`Explainer`, `explain`), as records (`Why`, its `Line` and `Table`) with
the numbers of this group; `crbc_viz.views.why` writes them as HTML.

Each estimator's explanation reads what its result exposes (CRBC's V and Q, the per-step value /
Q / credit columns) and computes the rest in one place here (μ, σ, the normalisation, the group
advantage, the final combination); `tests/views/test_why.py` checks that every final line equals
the estimator's own credit and advantage.

- CRBC (and visit-local averaging, its depth 0): V(s) as the solve gives it, Q(s, a) as the
  backup over the observed successors (count, P, V, boundary reward), σ(s), the gate, the
  normalisation, A^G and the final credit; visit-local: the suffix returns averaged.
- Shortest path (GraphGPO): d(s), the route from the successor to SUCCESS, R^G, the
  z-score over the source's outgoing occurrences, A^E and the final credit.
- GiGPO: the step group G^S(s) (its members' discounted returns), its mean and F_norm, A^E.
- Any other estimator: what its credit is (the registry's equation) and the values per visit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..graph import FAILURE, SUCCESS, AnchorGraph

__all__ = ["MAX_ROWS", "Line", "Table", "Why", "Explainer", "explain", "edge_steps"]

#: Rows of any one table in a panel, at most (the rest is counted).
MAX_ROWS = 12


@dataclass(frozen=True)
class Line:
    """One line of arithmetic: ``label = expr = value`` (``key`` names it for tests)."""

    key: str
    label: str
    expr: str
    value: float
    signed: bool = False
    whole: bool = False  # a count or a distance: written without decimals


@dataclass(frozen=True)
class Table:
    """A small table: ``cols`` are the machine names of its columns (``data-col``)."""

    caption: str
    header: tuple
    cols: tuple
    rows: list
    more: int = 0
    focus: int | None = None
    #: Cells carry their column and exact value (``data-col``, ``data-val``): the per-visit table.
    exact: bool = False


@dataclass(frozen=True)
class Why:
    """One estimator's explanation of the credit on a set of steps that share (s, a).

    ``credit`` and ``advantage`` ``[len(steps)]``: the step credit and the final credit as
    this explanation computes them (they equal the result's `credit` / `advantage`)."""

    estimator: str
    formula: str
    lines: list
    tables: list
    steps: np.ndarray
    credit: np.ndarray
    advantage: np.ndarray
    note: str = ""
    #: Independent sums the lines quote (``Q_backup``: β·Σ P·V; ``V_sum``: Σ_a μ·Q) for tests.
    checks: dict = field(default_factory=dict)


def _n(x: float, signed: bool = False) -> str:
    """A number as the panel writes it: 4 decimals (``+`` for a signed quantity)."""
    x = float(x)
    if not math.isfinite(x):
        return "—" if math.isnan(x) else ("∞" if x > 0 else "−∞")
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e5):
        s = f"{x:+.3e}" if signed else f"{x:.3e}"
    else:
        s = f"{x:+.4f}" if signed else f"{x:.4f}"
    return s.replace("-", "−")


def _terms(parts: list[str], limit: int = 6) -> str:
    if not parts:
        return "0"
    shown = " + ".join(parts[:limit])
    return shown + (f" + … ({len(parts) - limit} more)" if len(parts) > limit else "")


def edge_steps(graph: AnchorGraph, step: int, cut: np.ndarray | None = None) -> np.ndarray:
    """The occurrences of step ``step``'s edge (s, a, x) — apart for time-limit steps when
    ``cut`` (`crbc_viz.views.graph_values.truncated_steps`) is given — with ``step`` first."""
    same = graph.step_edge == graph.step_edge[step]
    if cut is not None:
        same &= cut == cut[step]
    occ = np.flatnonzero(same)
    return np.concatenate([[step], occ[occ != step]]).astype(np.int64)


class Explainer:
    """The explanations of one result on its graph (what every edge shares is computed once)."""

    def __init__(self, graph: AnchorGraph, result):
        self.graph = graph
        self.result = result
        self.name = result.estimator
        self.p = result.params

    # ---------------------------------------------------------------- shared pieces
    def node_name(self, n: int) -> str:
        if n == SUCCESS:
            return "SUCCESS"
        if n == FAILURE:
            return "FAILURE"
        g = int(self.graph.node_group[n])
        return f"s{n - int(self.graph.group_node_offsets[g])}"

    def action(self, p: int) -> str:
        return str(self.graph.action_names[self.graph.pair_action[p]])

    @cached_property
    def traj_ids(self) -> np.ndarray:
        return self.graph.batch.steps["traj_id"].astype(str).to_numpy()

    @cached_property
    def step_idx(self) -> np.ndarray:
        return self.graph.batch.steps["step_idx"].to_numpy(dtype=np.int64)

    @cached_property
    def mu(self) -> np.ndarray:
        """μ(a|s) = N(s, a) / N(s) per pair ``[P]``."""
        g = self.graph
        return g.pair_count / g.node_visits[g.pair_node]

    def group_adv(self, group: int, **kw) -> tuple[np.ndarray, str]:
        """A^G per trajectory ``[T]`` (`crbc_viz.ops.advantage.group_advantage`, the one A^G;
        ``kw`` its options) and how it reads with the outcomes of group ``group``."""
        from ..ops.advantage import group_advantage

        return group_advantage(self.graph, **kw), self.adv_expr(group, **kw)

    def adv_expr(self, group: int, *, norm="std", stats="trajectory", outcome="success", **_) -> str:
        """The statistics of A^G in group ``group``: its rollouts' mean outcome and spread."""
        from ..ops.returns import trajectory_outcome
        from ..ops.segments import segment_stats

        b = self.graph.batch
        lo, hi = int(b.group_traj_offsets[group]), int(b.group_traj_offsets[group + 1])
        R = trajectory_outcome(self.graph, outcome)[lo:hi]
        w = b.traj_len[lo:hi].astype(np.float64) if stats == "cross_steps" else None
        _, mean, std = segment_stats(R, np.zeros(len(R), np.int64), 1, ddof=1, weights=w)
        div = "1" if norm == "mean" else f"std R = {_n(std[0])} + ε"
        how = ", each rollout weighed by its length" if stats == "cross_steps" else ""
        return (
            f"(R_i − mean R = {_n(mean[0])}) / ({div}) over the group's {hi - lo} rollouts "
            f"({int(np.count_nonzero(R))} with R ≠ 0{how})"
        )

    def visits(self, steps: np.ndarray, credit, extra: dict, advantage, caption: str) -> Table:
        """The per-visit table: the columns of ``crbc-viz score`` (rollout, step, value,
        q_value, credit, advantage), with the explanation's own extra columns."""
        r = self.result
        shown = steps[:MAX_ROWS]
        cols = ("traj_id", "step_idx", "value", "q_value", "credit", *extra, "advantage")
        header = ("rollout", "step", "value", "Q", "credit", *(v[0] for v in extra.values()), "advantage")
        rows = []
        for k, s in enumerate(shown):
            rows.append(
                (
                    self.traj_ids[s],
                    int(self.step_idx[s]),
                    float(r.value[s]),
                    float(r.q_value[s]),
                    float(credit[k]),
                    *(float(v[1][k]) for v in extra.values()),
                    float(advantage[k]),
                )
            )
        return Table(caption, header, cols, rows, more=len(steps) - len(shown), focus=0, exact=True)

    # ---------------------------------------------------------------- dispatch
    def explain(self, steps) -> Why:
        steps = np.asarray(steps, dtype=np.int64)
        closure = self.name in ("crbc", "visit_local") and hasattr(self.p, "sigma_min")
        if closure and self.result.node_value is not None and self.result.pair_q is not None:
            return self._closure(steps)
        if self.name == "shortest_path":
            return self._shortest(steps)
        if self.name == "gigpo":
            return self._gigpo(steps)
        return self._generic(steps)

    # ---------------------------------------------------------------- CRBC family
    @cached_property
    def depth(self) -> float:
        return float(getattr(self.p, "depth", 0.0)) if self.name == "crbc" else 0.0

    @cached_property
    def sigma(self) -> np.ndarray:
        """σ(s) = sqrt(Σ_a μ(a|s)·(Q(s,a) − V(s))²) per node ``[N]``, from the result's V and Q."""
        g, r = self.graph, self.result
        adv = r.pair_q - r.node_value[g.pair_node]
        return np.sqrt(np.bincount(g.pair_node, weights=self.mu * adv**2, minlength=g.num_nodes))

    @cached_property
    def flat(self) -> np.ndarray:
        """Anchors whose Q(s, ·) agree within the round-off of the group's solve ``[N]`` (the
        one rule, `crbc_viz.ops.segments.no_spread`): no credit there."""
        from ..ops.returns import group_steps
        from ..ops.segments import no_spread

        g, r = self.graph, self.result
        return no_spread(
            r.pair_q,
            g.pair_node,
            g.num_nodes,
            magnitude=r.node_value[g.pair_node],
            terms=group_steps(g)[g.node_group[g.pair_node]],
        )

    @cached_property
    def previous_values(self) -> np.ndarray:
        """V^(K−1) ``[N]`` for a finite depth K ≥ 1: the same estimator one backup shallower."""
        import dataclasses

        from ..estimators.crbc import crbc

        fields = dataclasses.asdict(self.p)
        fields["depth"] = self.depth - 1
        return np.asarray(crbc(self.graph, **fields).node_value, dtype=np.float64)

    def _successors(self, p: int, values: np.ndarray, beta: float, vname: str) -> tuple[Table, str, float]:
        """Q(s, a) = β Σ_x P(x|s,a)·V(x): the table of observed successors and the sum."""
        g = self.graph
        es = np.flatnonzero(g.edge_pair == p)
        total = float(g.pair_count[p])
        rows, parts, acc = [], [], 0.0
        for e in es:
            x = int(g.edge_next[e])
            v = 1.0 if x == SUCCESS else 0.0 if x == FAILURE else float(values[x])
            pr = float(g.edge_count[e]) / total
            acc += pr * v
            what = " (reward 1: success)" if x == SUCCESS else " (reward 0: failure)" if x == FAILURE else ""
            rows.append((self.node_name(x) + what, int(g.edge_count[e]), pr, v, beta * pr * v))
            parts.append(f"{int(g.edge_count[e])}/{int(total)}×{_n(v)}")
        table = Table(
            f"Observed successors x of (s, a): Q(s,a) = β·Σ_x P(x|s,a)·{vname}(x), with "
            f"V(SUCCESS) = 1 and V(FAILURE) = 0",
            ("successor x", "N(s,a,x)", "P(x|s,a)", f"{vname}(x)", "β·P·V"),
            ("x", "count", "P", "V", "term"),
            rows[:MAX_ROWS],
            more=max(len(rows) - MAX_ROWS, 0),
        )
        return table, f"{_n(beta)} × ({_terms(parts)})", beta * acc

    def _returns_table(self, p: int, beta: float) -> tuple[Table, str, float]:
        """Q^(0)(s, a): the visit-local returns G = β^(T−t+1)·R of (s, a)'s occurrences."""
        g = self.graph
        b = g.batch
        occ = np.flatnonzero(g.step_pair == p)
        T = b.traj_len[b.step_traj[occ]]
        t1 = b.step_pos[occ] + 1
        R = b.traj_success[b.step_traj[occ]].astype(np.float64)
        G = beta ** (T - t1 + 1) * R
        rows = [
            (self.traj_ids[s], int(self.step_idx[s]), int(t1[k]), int(T[k]), float(R[k]), float(G[k]))
            for k, s in enumerate(occ[:MAX_ROWS])
        ]
        table = Table(
            "Suffix returns of (s, a)'s occurrences: G = β^(T−t+1)·R (t counted from 1)",
            ("rollout", "step", "t", "T", "R", "G"),
            ("traj_id", "step_idx", "t", "T", "R", "G"),
            rows,
            more=max(len(occ) - MAX_ROWS, 0),
        )
        mean = float(G.mean()) if G.size else float("nan")
        return table, f"mean of {len(occ)} returns ({_terms([_n(x) for x in G])}) / {len(occ)}", mean

    def _closure(self, steps: np.ndarray) -> Why:
        g, r, p = self.graph, self.result, self.p
        s0 = int(steps[0])
        n, pair = int(g.step_node[s0]), int(g.step_pair[s0])
        V, Q = float(r.node_value[n]), float(r.pair_q[pair])
        beta, depth = float(p.beta), self.depth
        lo, hi = int(g.node_pair_offsets[n]), int(g.node_pair_offsets[n + 1])
        tables = []
        # Actions at s: μ, Q, Q − V.
        arows = [
            (
                self.action(q),
                int(g.pair_count[q]),
                float(self.mu[q]),
                float(r.pair_q[q]),
                float(r.pair_q[q] - V),
            )
            for q in range(lo, hi)
        ]
        focus_row = pair - lo
        order = [focus_row] + [k for k in range(len(arows)) if k != focus_row]
        tables.append(
            Table(
                f"Actions observed at {self.node_name(n)} (N(s) = {int(g.node_visits[n])} visits)",
                ("action", "N(s,a)", "μ(a|s)", "Q(s,a)", "Q − V"),
                ("action", "count", "mu", "Q", "A"),
                [arows[k] for k in order[:MAX_ROWS]],
                more=max(len(arows) - MAX_ROWS, 0),
                focus=0,
            )
        )
        v_expr = _terms([f"{_n(self.mu[q])}×{_n(r.pair_q[q])}" for q in range(lo, hi)])
        succ, v_label, q_label, q_expr, q_sum = self._closure_backup(pair, beta, depth)
        tables.insert(0, succ)
        adv_inf = Q - V
        sig = float(self.sigma[n])
        sig_expr = (
            "sqrt("
            + _terms([f"{_n(self.mu[q])}×({_n(r.pair_q[q] - V, True)})²" for q in range(lo, hi)])
            + ")"
        )
        n_act = int(g.node_num_actions[n])
        gate = n_act >= int(p.min_actions)
        flat = bool(self.flat[n])
        denom = max(sig, float(p.sigma_min))
        a_s = adv_inf / denom if gate and not flat else 0.0
        if not gate:
            s_expr = f"0 (gate: {n_act} distinct action(s) at s, fewer than {int(p.min_actions)})"
        elif flat:
            s_expr = "0 (the Q(s, ·) agree within the round-off of the solve: no spread to credit)"
        else:
            s_expr = f"{_n(adv_inf, True)} / max({_n(sig)}, σ_min = {float(p.sigma_min):g}) = {_n(adv_inf, True)} / {_n(denom)}"
        a_traj, g_expr = self.group_adv(int(g.batch.traj_group[g.batch.step_traj[s0]]))
        a_g = a_traj[g.batch.step_traj[steps]]
        final = float(p.w_group) * a_g + float(p.w_step) * a_s
        lines = [
            Line("V", v_label, v_expr, V),
            Line("Q", q_label, q_expr, Q),
            Line("A_inf", "A(s,a) = Q(s,a) − V(s)", f"{_n(Q)} − {_n(V)}", adv_inf, True),
            Line("sigma", "σ(s) = sqrt(Σ_a μ(a|s)·A(s,a)²)", sig_expr, sig),
            Line("credit", "credit A^S = A / max(σ(s), σ_min)", s_expr, a_s, True),
            Line(
                "A_G",
                "A^G_i (per rollout, in the table)",
                g_expr,
                float(a_g[0]),
                True,
            ),
            Line(
                "advantage",
                "advantage = w_G·A^G + w_S·A^S (first visit)",
                f"{float(p.w_group):g}×{_n(a_g[0], True)} + {float(p.w_step):g}×{_n(a_s, True)}",
                float(final[0]),
                True,
            ),
        ]
        credit = np.full(len(steps), a_s)
        tables.append(
            self.visits(
                steps, credit, {"A_G": ("A^G", a_g)}, final, "Per visit (the numbers of crbc-viz score)"
            )
        )
        formula = _closure_formula(depth, int(p.min_actions))
        checks = {"Q_backup": q_sum, "V_sum": float(np.dot(self.mu[lo:hi], r.pair_q[lo:hi]))}
        return Why(self.name, formula, lines, tables, steps, credit, final, checks=checks)

    def _closure_backup(self, pair: int, beta: float, depth: float) -> tuple[Table, str, str, str, float]:
        """The table Q(s, a) is computed from (its successors, or at depth 0 the returns of its
        occurrences), the V and Q lines' labels, Q's expression and its independent sum."""
        r = self.result
        if math.isinf(depth):
            v_label = "V(s) (the solve (I − βM)V = b) = Σ_a μ(a|s)·Q(s,a)"
            succ, q_expr, q_sum = self._successors(pair, r.node_value, beta, "V")
            q_label = "Q(s,a) = β·Σ_x P(x|s,a)·V(x)"
        elif depth >= 1:
            v_label = f"V^({int(depth)})(s) = Σ_a μ(a|s)·Q^({int(depth)})(s,a)"
            succ, q_expr, q_sum = self._successors(pair, self.previous_values, beta, f"V^({int(depth) - 1})")
            q_label = f"Q^({int(depth)})(s,a) = β·Σ_x P(x|s,a)·V^({int(depth) - 1})(x)"
        else:
            v_label = "V^(0)(s) = mean of G over the visits of s = Σ_a μ(a|s)·Q^(0)(s,a)"
            succ, q_expr, q_sum = self._returns_table(pair, beta)
            q_label = "Q^(0)(s,a) = mean of G over (s, a)'s occurrences"
        return succ, v_label, q_label, q_expr, q_sum

    # ---------------------------------------------------------------- shortest path
    @cached_property
    def distances(self):
        from ..estimators.shortest_path import distance_to_success

        return distance_to_success(self.graph)

    def _route(self, x: int, d: np.ndarray) -> str:
        """A shortest route from ``x`` to SUCCESS (each hop one step nearer)."""
        g = self.graph
        names = [self.node_name(x)]
        seen = set()
        while x >= 0 and x not in seen and len(names) < 12:
            seen.add(x)
            es = np.flatnonzero(g.pair_node[g.edge_pair] == x)
            nxt = g.edge_next[es]
            if np.any(nxt == SUCCESS):
                x = SUCCESS
            else:
                closer = [int(y) for y in nxt if y >= 0 and d[y] == d[x] - 1]
                if not closer:
                    return " → ".join(names) + " (no route to SUCCESS)"
                x = closer[0]
            names.append(self.node_name(x))
        return " → ".join(names) + (" → …" if x >= 0 else "")

    def _shortest(self, steps: np.ndarray) -> Why:
        from ..ops.segments import no_spread

        g, p = self.graph, self.p
        s0 = int(steps[0])
        n, x = int(g.step_node[s0]), int(g.step_next[s0])
        d, d_unreach, reached = self.distances
        grp = int(g.node_group[n])
        omega, r_succ, plus = float(p.omega), float(p.r_succ), 1 if p.exponent == "d+c" else 0

        def dist(y: int) -> int:
            return 0 if y == SUCCESS else int(d_unreach[grp]) if y == FAILURE else int(d[y])

        # The source's outgoing occurrences, one row per edge (s, a, x′) with its count.
        es = np.flatnonzero(g.pair_node[g.edge_pair] == n)
        rg = np.array([r_succ * omega ** (dist(int(g.edge_next[e])) + plus) for e in es])
        cnt = g.edge_count[es].astype(np.float64)
        k = float(cnt.sum())
        vals = np.repeat(rg, g.edge_count[es])
        mean = float(vals.mean())
        std = float(np.sqrt(((vals - mean) ** 2).sum() / max(k - int(p.ddof), 1)))
        mine = r_succ * omega ** (dist(x) + plus)
        degenerate = k < 2 or bool(no_spread(vals, np.zeros(len(vals), np.int64), 1)[0]) or std == 0
        if not reached[grp]:
            z, z_expr = 0.0, "0 (no rollout of this group reached SUCCESS)"
        elif degenerate:
            z, z_expr = 0.0, "0 (a single occurrence, or no spread among R^G at s)"
        else:
            z = (mine - mean) / (std + float(p.eps))
            z_expr = f"({_n(mine)} − {_n(mean)}) / ({_n(std)} + {float(p.eps):g})"
        a_traj, g_expr = self.group_adv(grp)
        a_e = a_traj[g.batch.step_traj[steps]]
        final = float(p.w_graph) * z + float(p.w_group) * a_e
        table = Table(
            f"Outgoing occurrences of {self.node_name(n)} (the z-score's group, {int(k)} in all)",
            ("action", "successor x′", "count", "d(x′)", "R^G"),
            ("action", "x", "count", "d", "RG"),
            [
                (
                    self.action(int(g.edge_pair[e])),
                    self.node_name(int(g.edge_next[e])),
                    int(cnt[i]),
                    dist(int(g.edge_next[e])),
                    float(rg[i]),
                )
                for i, e in enumerate(es[:MAX_ROWS])
            ],
            more=max(len(es) - MAX_ROWS, 0),
        )
        expo = "d(x′)+1" if plus else "d(x′)"
        if x == FAILURE:
            route = "FAILURE: no route to SUCCESS, so dₘₐₓ + 1"
        elif x >= 0 and not reached[grp]:
            route = "no rollout of this group reached SUCCESS"
        else:
            route = self._route(x, d)
        lines = [
            Line("d_s", "d(s) = min over out-edges of 1 + d(x′)", "", float(d[n]), whole=True),
            Line("route", "d(x′), the hops of a shortest route from x′", route, float(dist(x)), whole=True),
            Line("RG", f"q = R^G = r_succ·ω^({expo})", f"{r_succ:g}×{omega:g}^{dist(x) + plus}", mine),
            Line("mean", "mean of R^G over s's outgoing occurrences", "", mean),
            Line("std", f"std (ddof = {int(p.ddof)})", "", std),
            Line("credit", "credit A_graph = (R^G − mean) / (std + ε)", z_expr, z, True),
            Line("A_G", "A^E_i (per rollout, in the table)", g_expr, float(a_e[0]), True),
            Line(
                "advantage",
                "advantage = β_G·A_graph + β_E·A^E (first visit)",
                f"{float(p.w_graph):g}×{_n(z, True)} + {float(p.w_group):g}×{_n(a_e[0], True)}",
                float(final[0]),
                True,
            ),
        ]
        credit = np.full(len(steps), z)
        tables = [
            table,
            self.visits(
                steps, credit, {"A_G": ("A^E", a_e)}, final, "Per visit (the numbers of crbc-viz score)"
            ),
        ]
        formula = f"d(SUCCESS) = 0, d(s) = min 1 + d(x′);  R^G = r_succ·ω^({expo});  A = z-score over s's out-occurrences + A^E"
        note = "" if x != FAILURE else f"FAILURE counts as unreachable: d = dₘₐₓ + 1 = {int(d_unreach[grp])}."
        return Why(self.name, formula, lines, tables, steps, credit, final, note=note)

    # ---------------------------------------------------------------- GiGPO
    @cached_property
    def step_group(self) -> tuple[np.ndarray, int]:
        from ..estimators.gigpo import step_groups

        return step_groups(self.graph, bool(self.p.similarity), float(self.p.similarity_thresh))

    @cached_property
    def gigpo_magnitude(self) -> np.ndarray:
        from ..ops.returns import discounted_returns, step_rewards

        r = step_rewards(self.graph, self.p.step_reward, self.p.outcome)
        return discounted_returns(self.graph, np.abs(r), float(self.p.gamma))

    def _gigpo(self, steps: np.ndarray) -> Why:
        from ..ops.returns import group_steps
        from ..ops.segments import no_spread

        g, r, p = self.graph, self.result, self.p
        seg, _ = self.step_group
        s0 = int(steps[0])
        members = np.flatnonzero(seg == seg[s0])
        R = np.asarray(r.q_value, dtype=np.float64)
        vals = R[members]
        k = len(members)
        mean = float(vals.mean())
        std = float(np.sqrt(((vals - mean) ** 2).sum() / max(k - 1, 1)))
        scaled = p.mode == "mean_std_norm"
        terms = group_steps(g)[g.batch.step_group[members]]
        degenerate = (
            k < 2
            or bool(
                no_spread(
                    vals, np.zeros(k, np.int64), 1, magnitude=self.gigpo_magnitude[members], terms=terms
                )[0]
            )
            or std == 0
        )
        fnorm = std + float(p.eps) if scaled else 1.0
        a_s = np.zeros(len(steps)) if degenerate else (R[steps] - mean) / fnorm
        from ..estimators.gigpo import episode_advantage

        a_traj = episode_advantage(g, p.mode, p.episode_stats, float(p.eps), p.outcome)
        a_e = a_traj[g.batch.step_traj[steps]]
        final = a_e + float(p.omega) * a_s
        kind = "similar anchors" if p.similarity else "visits of this anchor"
        table = Table(
            f"The step group G^S: the {k} {kind} and their discounted returns R_t = r_t + γ·R_(t+1)",
            ("rollout", "step", "anchor", "R_t"),
            ("traj_id", "step_idx", "anchor", "R"),
            [
                (self.traj_ids[s], int(self.step_idx[s]), self.node_name(int(g.step_node[s])), float(R[s]))
                for s in members[:MAX_ROWS]
            ],
            more=max(k - MAX_ROWS, 0),
        )
        if degenerate:
            s_expr = "0 (a singleton step group, or returns that agree within round-off)"
        else:
            s_expr = f"({_n(R[s0])} − {_n(mean)}) / {_n(std) + ' + ' + format(float(p.eps), 'g') if scaled else '1'}"
        lines = [
            Line("Rt", f"q = R_t of the first visit (γ = {float(p.gamma):g})", "", float(R[s0])),
            Line("mean", f"value = mean of R over G^S ({k} members)", "", mean),
            Line(
                "std", "std of R over G^S (ddof = 1)" + ("" if scaled else ", unused in mean_norm"), "", std
            ),
            Line(
                "credit",
                f"credit A^S = (R_t − mean) / {'(std + ε)' if scaled else '1'}",
                s_expr,
                float(a_s[0]),
                True,
            ),
            Line(
                "A_G",
                "A^E_i (per rollout, in the table)",
                self.adv_expr(
                    int(g.batch.traj_group[g.batch.step_traj[s0]]),
                    norm="mean" if p.mode == "mean_norm" else "std",
                    stats=p.episode_stats,
                    outcome=p.outcome,
                ),
                float(a_e[0]),
                True,
            ),
            Line(
                "advantage",
                "advantage = A^E + ω·A^S (first visit)",
                f"{_n(a_e[0], True)} + {float(p.omega):g}×{_n(a_s[0], True)}",
                float(final[0]),
                True,
            ),
        ]
        tables = [
            table,
            self.visits(
                steps, a_s, {"A_G": ("A^E", a_e)}, final, "Per visit (the numbers of crbc-viz score)"
            ),
        ]
        formula = "R_t = r_t + γR_(t+1);  A^S = (R_t − mean_G^S)/F_norm;  A = A^E + ω·A^S"
        return Why(self.name, formula, lines, tables, steps, a_s, final)

    # ---------------------------------------------------------------- any other estimator
    def _generic(self, steps: np.ndarray) -> Why:
        from ..estimators.registry import get

        r = self.result
        try:
            spec = get(self.name)
            formula, what = spec.equation, spec.title
        except Exception:  # a result of an estimator this process does not know
            formula, what = "", self.name
        credit = np.asarray(r.credit, dtype=np.float64)[steps]
        adv = np.asarray(r.advantage, dtype=np.float64)[steps]
        fin = credit[np.isfinite(credit)]
        lines = [
            Line(
                "credit_mean",
                "mean step credit over these visits (the edge's colour)",
                f"{len(fin)} finite of {len(steps)}",
                float(fin.mean()) if fin.size else float("nan"),
                True,
            )
        ]
        note = (
            f"{what}: the credit is this estimator's own step term and the advantage what it feeds "
            f"the policy loss (its formula: the Estimators page). The values come from its result."
        )
        tables = [self.visits(steps, credit, {}, adv, "Per visit (the numbers of crbc-viz score)")]
        return Why(self.name, formula, lines, tables, steps, credit, adv, note=note)


def _closure_formula(depth: float, min_actions: int) -> str:
    """The closure's equations at ``depth`` (∞: the solve; K ≥ 1: K backups; 0: the returns)."""
    if math.isinf(depth):
        return (
            f"(I − βM)V = b;  Q = BV;  A^S = 1{{#a ≥ {min_actions}}}·(Q − V)/max(σ(s), σ_min);  "
            "A = w_G·A^G + w_S·A^S"
        )
    if depth >= 1:
        return f"depth K = {int(depth)}: V^(K) = T^K V^(0), Q^(K) = B V^(K−1); then as CRBC"
    return "G = β^(T−t+1)·R;  Q⁰ = mean G over (s,a);  V⁰ = mean G over s;  then as CRBC"


def explain(graph: AnchorGraph, result, steps) -> Why:
    """The explanation of ``result``'s credit on ``steps`` (global step ids sharing one
    (anchor, action) pair; the first is the one the lines quote)."""
    return Explainer(graph, result).explain(steps)
