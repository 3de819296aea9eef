"""Lesson 4's one Bellman backup (`teaching.backup_once`, `backup_latex`), the lessons'
predictions and their code blocks, against the estimators and ESTIMATORS.md §14.4 / §14.5."""

from __future__ import annotations

import contextlib
import io
import math
import re

import numpy as np
import pytest

from crbc_viz import build_graph
from crbc_viz import teaching as T
from crbc_viz.estimators.crbc import crbc

BETA = 0.98


def toy():
    return build_graph(T.batch_from_rows(T.read_rows(T.TOY_PATH)))


GRAPHS = {
    "toy": toy,
    "sokoban": lambda: build_graph(T.batch_from_rows(T.sokoban_rows())),
    "rare_route": lambda: build_graph(T.batch_from_rows(T.rare_route_rows())),
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("beta", [0.9, BETA])
def test_iterated_backups_settle_at_the_closure(name, beta):
    g = GRAPHS[name]()
    v = crbc(g, beta=beta, depth=0).node_value  # V⁰: the visit-local averages
    for k in range(1, 4):  # the k-th backup is the estimator's depth-k member
        v = T.backup_once(g, v, beta)
        np.testing.assert_allclose(v, crbc(g, beta=beta, depth=k).node_value, atol=1e-12)
    for _ in range(5000):
        nxt = T.backup_once(g, v, beta)
        done = np.max(np.abs(nxt - v)) < 1e-15
        v = nxt
        if done:
            break
    closure = crbc(g, beta=beta).node_value  # one linear solve
    assert np.max(np.abs(v - closure)) < 1e-9


def test_backup_equation_with_the_toy_numbers():
    g = toy()
    v_inf = np.array([0.4636, 0.4802, 0.6533, 0.0, 0.4659])  # §14.4
    s0 = [str(a) for a in g.node_anchor_obs].index("s0")
    tex = T.backup_latex(g, v_inf, s0, BETA, None)
    # s0: a → s1 (t1, t2), f → s4 (t3, t4): V(s0) = ½·0.98·V(s1) + ½·0.98·V(s4) by hand.
    assert tex.count(r"\underbrace{0.50}") == 2
    assert r"\underset{\text{s1}}{0.480}" in tex and r"\underset{\text{s4}}{0.466}" in tex
    assert tex.endswith(f"&= {0.49 * 0.4802 + 0.49 * 0.4659:.3f}\n\\end{{aligned}}")
    assert "^" not in tex.replace("V^{", "")  # only V's own superscript, as LaTeX
    s1 = [str(a) for a in g.node_anchor_obs].index("s1")
    tex1 = T.backup_latex(g, v_inf, s1, BETA, 3)
    assert r"V^{(3)}(\text{s1}) &=" in tex1 and r"V^{(2)}(x)" in tex1
    assert r"\underbrace{0.75}_{\mu(\text{b})}" in tex1  # t1, t3, t4 take b at s1; t2 takes d
    s2 = [str(a) for a in g.node_anchor_obs].index("s2")
    tex2 = T.backup_latex(g, v_inf, s2, BETA, None)
    assert r"\underset{\text{SUCCESS}}{1.000}" in tex2 and r"\underset{\text{FAILURE}}{0.000}" in tex2


def test_predictions_answer_what_the_spec_says():
    g = toy()
    s4 = [str(a) for a in g.node_anchor_obs].index("s4")
    p3 = T.lesson_prediction(3, g, node=s4)
    assert set(p3.options) == {"g", "i"} and p3.answer == "i"  # §14.5 K = 0: A(s4,i) = +0.3012
    p4 = T.lesson_prediction(4, g, node=s4)
    assert p4.answer == "g" and "changed the verdict" in p4.why  # §14.4: A∞(s4,g) = +0.0047
    p2 = T.lesson_prediction(2, g)
    assert p2.answer == "5" and "15 steps" in p2.question  # 4 rollouts, 15 steps, s0 … s4
    p1 = T.lesson_prediction(1, g)
    assert p1.answer == "every step the same" and p1.answer in p1.options
    p5 = T.lesson_prediction(5, g, credits={"shortest": (0.9, -0.9), "crbc": (-1.0, 1.0)})
    assert p5.answer == "blames it"  # the closure's (last) credit of the jump is negative
    p5 = T.lesson_prediction(5, g, credits={"shortest": (0.9, -0.9), "crbc": (1.0, -1.0)})
    assert p5.answer == "praises it"
    for q in (*T.QUIZ, p1, p2, p3, p4, p5, T.lesson_prediction(6, g)):
        assert q.answer in q.options and q.why


def _outside_math(text: str) -> str:
    return re.sub(r"\$[^$]*\$", "", text)


def test_lesson_texts_have_no_caret_notation():
    for ls in T.LESSONS:
        for text in (ls.text, ls.try_it):
            assert text.count("$") % 2 == 0
            bare = _outside_math(text)
            assert "^" not in bare and not re.search(r"\b[wA]_", bare), (ls.number, bare)
    assert "Q − V" not in T.MARK_RULE
    assert "Corollary 3" in T.LESSONS[3].text  # the bound is named and written out


def run_block(code: str) -> list[list[str]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<lesson code>", "exec"), {})
    return [line.split() for line in out.getvalue().splitlines()]


@pytest.mark.parametrize("n", range(1, 7))
def test_code_blocks_are_short_crbc_viz_programs(n):
    data = "rare_route" if n == 5 else "toy"
    code = T.lesson_code(n, data, rr=(4, 1, 4, 3), node=4, node_name="s4", k=3)
    assert len(code.splitlines()) <= 15
    imports = [ln.split()[1] for ln in code.splitlines() if ln.startswith(("import ", "from "))]
    assert imports and all(m == "crbc_viz" or m.startswith("crbc_viz.") for m in imports)
    assert run_block(code)


def test_code_blocks_print_the_spec_numbers():
    # §14.5 K = 3: A(s4,g) = −0.0008, A(s4,i) = +0.0015; §14.4 A^S(s0,a) = +0.0699.
    lines = run_block(T.lesson_code(4, "toy", k=3))
    got = {" ".join(w[:-1]): float(w[-1]) for w in lines}
    assert got["s4 · g"] == pytest.approx(-0.0008, abs=6e-4) and got["s4 · i"] == pytest.approx(
        0.0015, abs=6e-4
    )
    got6 = {" ".join(w[:-1]): float(w[-1]) for w in run_block(T.lesson_code(6, "toy"))}
    assert got6["s0 · a"] == pytest.approx(0.0699, abs=6e-4) and got6["s3 · e"] == 0.0
    v = {w[0]: (float(w[1]), float(w[2])) for w in run_block(T.lesson_code(3, "toy", node=4))}
    assert v["i"][1] == pytest.approx(0.3012, abs=6e-4) and not math.isnan(v["g"][0])


def test_biggest_change_names_the_pair_that_moved_most():
    before = {("s0", "a"): 0.1, ("s1", "b"): 0.5, ("s4", "i"): 0.3}
    after = {("s0", "a"): 0.12, ("s1", "b"): 0.45, ("s4", "i"): -0.2, ("new", "x"): 9.0}
    assert T.biggest_change(before, after) == (("s4", "i"), 0.3, -0.2)
    assert T.biggest_change(before, dict(before)) is None
    # Toy, t3 flipped: every visit of s4 now succeeds, so visit-local A⁰(s4, ·) collapses from
    # (g −0.1506, i +0.3012; §14.5) to near 0 and i's normalised credit, +√2 (two actions,
    # μ = 2/3, 1/3: A/σ = √(μ_g/μ_i)), falls the most; s1's pair keeps ±√(μ/μ') (σ > σ_min).
    g0 = toy()
    g1 = build_graph(T.batch_from_rows(T.apply_edits(T.read_rows(T.TOY_PATH), flip=["t3"])))
    vl0, vl1 = crbc(g0, depth=0), crbc(g1, depth=0)
    (anchor, action), x0, x1 = T.biggest_change(T.credit_by_pair(g0, vl0), T.credit_by_pair(g1, vl1))
    assert (anchor, action) == ("s4", "i") and x0 == pytest.approx(2**0.5, abs=1e-3) and x1 < 0


def test_questions_are_caret_free_and_answers_not_always_first():
    g = toy()
    asked = [*T.QUIZ, *(T.lesson_prediction(n, g) for n in (1, 2, 3, 4, 6))]
    for q in asked:
        for text in (q.question, *q.options, q.why):
            assert "^" not in _outside_math(text) and text.count("$") % 2 == 0, text
    assert len({q.options.index(q.answer) for q in T.QUIZ}) >= 2
