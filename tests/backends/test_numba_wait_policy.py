"""numba's OpenMP pool starts with the passive wait policy (a worker with no group left sleeps
instead of spinning on a core another thread needs), set only while the pool starts and never
over a policy the user chose."""

import os

import pytest

pytest.importorskip("numba")

from numba.np.ufunc import parallel  # noqa: E402

from crbc_viz.backends.numba import crbc  # noqa: E402


@pytest.fixture
def fresh_pool(monkeypatch):
    seen = []
    monkeypatch.setattr(parallel, "_is_initialized", False)
    monkeypatch.setattr(parallel, "_launch_threads", lambda: seen.append(os.environ.get("OMP_WAIT_POLICY")))
    return seen


def test_pool_starts_passive_and_the_variable_is_gone_after(fresh_pool, monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    crbc._launch_threads()
    assert fresh_pool == ["PASSIVE"]
    assert "OMP_WAIT_POLICY" not in os.environ


def test_a_users_policy_is_kept(fresh_pool, monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    crbc._launch_threads()
    assert fresh_pool == ["ACTIVE"] and os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_a_started_pool_is_left_alone(monkeypatch):
    calls = []
    monkeypatch.setattr(parallel, "_is_initialized", True)
    monkeypatch.setattr(parallel, "_launch_threads", lambda: calls.append(1))
    crbc._launch_threads()
    assert calls == []
