"""What a store's manifests say, read without the data: the parts each names, which sources
readers see (a new version of a log hides the old one once complete), and the importers'
per-file counts summed."""

from __future__ import annotations

from .layout import Part


def _sum_import_counts(manifests) -> dict:
    """The importers' per-file counts (``copies_dropped``, ``copies_suspected``: see
    `crbc_viz.io.importers._common.COUNTS`) summed over the complete sources that report them."""
    out: dict[str, int] = {}
    for m in manifests:
        counts = m.get("counts") if m.get("complete") else None
        if isinstance(counts, dict):
            for k, v in counts.items():
                if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                    out[k] = out.get(k, 0) + v
    return out


def _manifest_parts(m: dict) -> tuple[Part, ...]:
    """The parts a (checked) manifest names, in its order."""
    started = str(m.get("started_at", ""))
    return tuple(
        Part(
            path=p["path"],
            text=p.get("text"),
            source=m["digest"],
            run_id=str(p["run_id"]),
            train_step=int(p["train_step"]),
            rows=int(p["rows"]),
            order=(started, m["digest"], k),
        )
        for k, p in enumerate(m.get("parts", []))
    )


def hidden_sources(manifests: dict[str, dict]) -> set[str]:
    """Digests of the sources readers do not see: each source a complete manifest ``replaces``,
    and each incomplete source that replaces one still in the store (a new version of a log
    becomes visible, and hides the old one, in the one write that marks it complete).

    >>> old = {"digest": "a", "complete": True}
    >>> new = {"digest": "b", "complete": False, "replaces": ["a"]}
    >>> sorted(hidden_sources({"a": old, "b": new}))
    ['b']
    >>> sorted(hidden_sources({"a": old, "b": {**new, "complete": True}}))
    ['a']
    """
    hidden: set[str] = set()
    for digest, m in manifests.items():
        older = [r for r in m.get("replaces", ()) if r in manifests and r != digest]
        if m.get("complete"):
            hidden.update(older)
        elif older:
            hidden.add(digest)
    return hidden


def incomplete_sources(store) -> list[dict]:
    """Manifests of sources whose ingest did not finish (a crash, a kill -9, or one being
    written now): their committed parts are readable but the source is partial. A new version
    of a log that is still incomplete is listed too (its parts stay hidden until it is whole)."""
    return [m for m in store.manifests.values() if not m.get("complete")]
