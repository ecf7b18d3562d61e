"""Failure modes: runs' feature documents clustered with scikit-learn, named, and assigned.

Why this clustering (the guide, ``steplog guide modes``, says it for users):

* **Identical documents first.** Runs repeat: thousands of failed runs make a few hundred
  distinct feature documents. Clustering the distinct documents (each remembering how many runs
  it stands for) keeps the cost independent of the number of runs.
* **TF-IDF over tokens**, the document frequency counted over runs: a token every failure has
  (``end:failed``) weighs little, a distinctive one (``repeat:same``, ``layer:schema``) a lot.
* **Agglomerative clustering, cosine distance, average linkage, a distance threshold**
  (:class:`sklearn.cluster.AgglomerativeClustering`): deterministic (no random start, unlike
  k-means), no number of modes to choose (the threshold says how different two modes must be),
  and average linkage does not chain unrelated documents the way single linkage does. HDBSCAN
  would label rare failures noise; a failure seen twice is still a mode here.
  Beyond ``MAX_UNIQUE`` distinct documents, the most frequent are clustered and the rest
  assigned to the nearest mode, which bounds memory (the distance matrix is quadratic).

A mode's id is a hash of its defining tokens (the centroid's heaviest), so a rebuild on the same
log gives the same ids, and one on a log that barely changed keeps them.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ._features import RunFeatures
from ._names import mode_name

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

DISTANCE = 0.6
"""Cosine distance (average linkage) above which two groups of runs are different modes."""
WORD_WEIGHT = 0.5
"""A message word's weight beside structural tokens (layer, limit, repetition): words say less."""
CONCEPT_WEIGHT = 2.0
"""A failure family (``concept:context_limit``) outweighs the class that raised it: frameworks
raise one cause under many exception classes."""


ONSET_WEIGHT = 2.0
"""Trouble that began late (``onset:late``) outweighs the rest of the trajectory's shape: it is
what tells an error rate growing along the run from a steady one when both raise one error."""


CLEAN_UNTIL_WEIGHT = 4.0
"""A run that went well for many steps before its error struck (``clean_until:``) is told
from one that struggled all along with the same error by that alone: it must outweigh the
ending the two share (error type, message, retries)."""


def _weight(token: str) -> float:
    if token == "onset:late":
        return ONSET_WEIGHT
    if token.startswith("clean_until:"):
        return CLEAN_UNTIL_WEIGHT
    if token.startswith("w:"):
        return WORD_WEIGHT
    if token.startswith("concept:"):
        return CONCEPT_WEIGHT
    if token.startswith("err:") and "." in token:  # a framework's exception class, by module
        return WORD_WEIGHT
    return 1.0


MAX_UNIQUE = 4000
DEFINING = 4
CORE_SHARE = 0.8
"""A token at least this share of a mode's runs have is part of what defines it (its id)."""
EXEMPLARS = 3
TOP = 5


@dataclass(frozen=True, slots=True)
class Mode:
    """One failure mode: its id, name, runs and where it strikes."""

    id: str
    name: str
    size: int
    defining: tuple[str, ...]  # the centroid's heaviest tokens, heaviest first
    by_version: dict[str, int]
    by_scenario: dict[str, int]
    steps: dict[str, int]  # the steps where it strikes (most runs first)
    signatures: dict[str, int]
    exemplars: tuple[str, ...]  # runs nearest the centre

    def as_dict(self) -> dict[str, Any]:
        """The mode as JSON."""
        return {
            "id": self.id,
            "name": self.name,
            "size": self.size,
            "defining_features": list(self.defining),
            "by_version": self.by_version,
            "by_scenario": self.by_scenario,
            "steps": self.steps,
            "signatures": self.signatures,
            "exemplars": list(self.exemplars),
        }


@dataclass(frozen=True, slots=True)
class ModeSet:
    """The modes of a set of runs, largest first, and what assigns a new run to one."""

    modes: tuple[Mode, ...]
    assignment: dict[str, str]  # run id -> mode id
    vocabulary: dict[str, int]
    idf: npt.NDArray[np.float64]
    centroids: npt.NDArray[np.float64]  # one unit row per mode, in ``modes`` order

    def mode(self, mode_id: str) -> Mode | None:
        """The mode with ``mode_id`` (or a unique prefix of it)."""
        found = [m for m in self.modes if m.id.startswith(mode_id)]
        return found[0] if len(found) == 1 else None

    def assign(self, runs: Sequence[RunFeatures]) -> dict[str, str | None]:
        """New runs' nearest modes by cosine to the centroids (``None`` when no mode is within
        ``DISTANCE``: a cause not seen at the last rebuild)."""
        if not runs or not self.modes:
            return {run.run_id: None for run in runs}
        docs, inverse, _ = _unique(runs)
        vectors = _vectors(docs, self.vocabulary, self.idf)
        similarity = np.asarray(vectors @ self.centroids.T)
        best = similarity.argmax(axis=1)
        near = similarity[np.arange(len(docs)), best] >= 1 - DISTANCE
        ids = [
            self.modes[b].id if ok else None
            for b, ok in zip(best.tolist(), near.tolist(), strict=True)
        ]
        return {run.run_id: ids[i] for run, i in zip(runs, inverse.tolist(), strict=True)}


def _unique(runs: Sequence[RunFeatures]) -> tuple[list[str], npt.NDArray[np.intp], list[int]]:
    """Distinct documents (most runs first, then alphabetical), each run's document index, and
    the runs per document."""
    documents = [run.document for run in runs]  # joined once: a property, not a field
    counts = Counter(documents)
    docs = sorted(counts, key=lambda d: (-counts[d], d))
    index = {doc: i for i, doc in enumerate(docs)}
    inverse = np.fromiter((index[doc] for doc in documents), np.intp, len(runs))
    return docs, inverse, [counts[d] for d in docs]


def _vectors(
    docs: Sequence[str], vocabulary: dict[str, int], idf: npt.NDArray[np.float64]
) -> csr_matrix:
    """Unit TF-IDF rows of ``docs`` (binary term frequency: a token is there or not)."""
    from scipy.sparse import csr_matrix
    from sklearn.preprocessing import normalize

    rows, cols = [], []
    for i, doc in enumerate(docs):
        for token in doc.split(" "):
            column = vocabulary.get(token)
            if column is not None:
                rows.append(i)
                cols.append(column)
    data = idf[np.asarray(cols, dtype=np.intp)] if cols else np.zeros(0)
    matrix = csr_matrix((data, (rows, cols)), shape=(len(docs), len(vocabulary)))
    return normalize(matrix)


def _space(
    runs: Sequence[RunFeatures],
) -> tuple[list[str], npt.NDArray[np.intp], list[int], dict[str, int], npt.NDArray[np.float64]]:
    """The distinct documents of ``runs`` (sorted by run id), each run's document index, the
    runs per document, the vocabulary and the weighted IDF (document frequency over runs)."""
    docs, inverse, weights = _unique(runs)
    vocabulary = {t: i for i, t in enumerate(sorted({t for d in docs for t in d.split(" ")}))}
    df = np.zeros(len(vocabulary))
    for doc, count in zip(docs, weights, strict=True):
        for token in doc.split(" "):
            df[vocabulary[token]] += count
    idf = np.log((1 + len(runs)) / (1 + df)) + 1
    for token, column in vocabulary.items():
        idf[column] *= _weight(token)
    return docs, inverse, weights, vocabulary, idf


def build_modes(runs: Sequence[RunFeatures], *, distance: float = DISTANCE) -> ModeSet:
    """Cluster ``runs`` into modes (deterministic: the same runs give the same modes and ids,
    whatever their order)."""
    runs = sorted(runs, key=lambda r: r.run_id)
    if not runs:
        return ModeSet((), {}, {}, np.zeros(0), np.zeros((0, 0)))
    docs, inverse, weights, vocabulary, idf = _space(runs)
    vectors = _vectors(docs, vocabulary, idf)
    labels = _labels(vectors, distance)
    weight = np.asarray(weights, dtype=float)
    groups = sorted(
        (np.flatnonzero(labels == label) for label in np.unique(labels)),
        key=lambda rows: (-weight[rows].sum(), docs[rows[0]]),
    )
    terms = sorted(vocabulary, key=vocabulary.__getitem__)
    modes: list[Mode] = []
    centroids: list[npt.NDArray[np.float64]] = []
    taken: set[str] = set()
    members: dict[int, list[RunFeatures]] = {}
    for run, d in zip(runs, inverse.tolist(), strict=True):
        members.setdefault(d, []).append(run)
    for rows in groups:
        centroid = _centroid(vectors, rows, weight[rows])
        mode = _mode(rows, centroid, vectors, terms, idf, members, taken)
        taken.add(mode.id)
        modes.append(mode)
        centroids.append(centroid)
    assignment = {
        run.run_id: modes[i].id
        for i, rows in enumerate(groups)
        for d in rows.tolist()
        for run in members[d]
    }
    return ModeSet(tuple(modes), assignment, vocabulary, idf, np.vstack(centroids))


def _centroid(
    vectors: csr_matrix, rows: npt.NDArray[np.intp], counts: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """The unit mean of the documents ``rows``, each weighted by its runs ``counts``."""
    centroid = np.asarray((vectors[rows].T @ counts).T).reshape(-1)
    centroid /= np.linalg.norm(centroid) or 1.0
    return centroid


def refreshed(modes: ModeSet, runs: Sequence[RunFeatures], touched: Iterable[str]) -> ModeSet:
    """``modes`` (whose ``assignment`` already holds every run of ``runs``) with each
    ``touched`` mode's size, counts by version and scenario, steps, signatures and exemplars
    recomputed over its runs exactly as :func:`build_modes` computes them: the TF-IDF of every
    run of ``runs``, the centre of the mode's runs, the runs nearest it. On the same membership,
    the same exemplars as a rebuild. The id, name and defining features stay those of the last
    rebuild (an id that moved with every new run could not be pointed at), and so do the
    centroids new runs are assigned by (:meth:`ModeSet.assign`). The modes are ordered largest
    first again (ties in their former order)."""
    wanted = set(touched) & {m.id for m in modes.modes}
    if not wanted:
        return modes
    runs = sorted(runs, key=lambda r: r.run_id)
    docs, inverse, _, vocabulary, idf = _space(runs)
    vectors = _vectors(docs, vocabulary, idf)
    members: dict[str, dict[int, list[RunFeatures]]] = {m: {} for m in wanted}
    for run, d in zip(runs, inverse.tolist(), strict=True):
        mode_id = modes.assignment.get(run.run_id)
        if mode_id in members:
            members[mode_id].setdefault(d, []).append(run)
    updated = []
    for mode in modes.modes:
        found = members.get(mode.id)
        if not found:  # not touched (or, against the contract, left without runs)
            updated.append(mode)
            continue
        rows = np.asarray(sorted(found), dtype=np.intp)
        counts = np.asarray([len(found[d]) for d in rows.tolist()], dtype=float)
        summary = _summary(rows, _centroid(vectors, rows, counts), vectors, found)
        updated.append(replace(mode, **summary))
    order = sorted(range(len(updated)), key=lambda i: -updated[i].size)  # stable: ties keep theirs
    return replace(modes, modes=tuple(updated[i] for i in order), centroids=modes.centroids[order])


def _labels(vectors: csr_matrix, distance: float) -> npt.NDArray[np.intp]:
    """Cluster labels of the unit rows (the first ``MAX_UNIQUE`` clustered; the rest assigned
    to the nearest of their centroids)."""
    from sklearn.cluster import AgglomerativeClustering

    n = vectors.shape[0]
    if n == 1:
        return np.zeros(1, dtype=np.intp)
    head = min(n, MAX_UNIQUE)
    dense = vectors[:head].toarray()
    model = AgglomerativeClustering(
        n_clusters=None, metric="cosine", linkage="average", distance_threshold=distance
    )
    labels = np.empty(n, dtype=np.intp)
    labels[:head] = model.fit_predict(dense)
    if n > head:
        found = np.unique(labels[:head])
        centres = np.vstack([dense[labels[:head] == k].mean(axis=0) for k in found])
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
        labels[head:] = found[np.asarray(vectors[head:] @ centres.T).argmax(axis=1)]
    return labels


def _mode(
    rows: npt.NDArray[np.intp],
    centroid: npt.NDArray[np.float64],
    vectors: csr_matrix,
    terms: list[str],
    idf: npt.NDArray[np.float64],
    members: dict[int, list[RunFeatures]],
    taken: set[str],
) -> Mode:
    runs = [run for d in rows.tolist() for run in members[d]]
    # distinctive: heavy in the centroid and rare overall (idf), ties broken by name
    score = centroid * idf
    order = sorted(
        np.flatnonzero(score > 0).tolist(), key=lambda c: (-round(float(score[c]), 9), terms[c])
    )
    defining = tuple(terms[c] for c in order)
    # the id: the tokens most of its runs share (a set that a few runs more or less do not
    # move, unlike a ranking), then as many of the ranked tokens as make it unique
    shares = Counter(t for run in runs for t in run.tokens)
    core = tuple(sorted(t for t, n in shares.items() if n >= CORE_SHARE * len(runs)))
    size = 0
    mode_id = _hash(core)
    while mode_id in taken and size < len(defining):
        size += 1
        mode_id = _hash((*core, "|", *defining[:size]))
    if mode_id in taken:
        mode_id = _hash((*defining, runs[0].run_id))
    return Mode(
        id=mode_id,
        name=mode_name(defining),
        defining=defining[:DEFINING],
        **_summary(rows, centroid, vectors, members),
    )


def _summary(
    rows: npt.NDArray[np.intp],
    centroid: npt.NDArray[np.float64],
    vectors: csr_matrix,
    members: dict[int, list[RunFeatures]],
) -> dict[str, Any]:
    """What a mode's runs (``members`` of the documents ``rows``) say: their number, counts by
    version and scenario, the steps and signatures where it strikes, and the exemplars (the
    runs of the documents nearest ``centroid``; ties by document order, then run id)."""
    runs = [run for d in rows.tolist() for run in members[d]]
    nearest = np.asarray(vectors[rows] @ centroid).reshape(-1)
    central = [
        rows[i] for i in sorted(range(len(rows)), key=lambda i: (-round(float(nearest[i]), 9), i))
    ]
    exemplars = [run.run_id for d in central for run in members[d]][:EXEMPLARS]
    return {
        "size": len(runs),
        "by_version": _counted(run.model_version for run in runs),
        "by_scenario": _counted(run.scenario for run in runs),
        "steps": dict(list(_counted(run.step for run in runs).items())[:TOP]),
        "signatures": dict(
            list(_counted(run.signature for run in runs if run.signature).items())[:TOP]
        ),
        "exemplars": tuple(exemplars),
    }


def _hash(tokens: Sequence[str]) -> str:
    return hashlib.sha256("\x1f".join(tokens).encode()).hexdigest()[:12]


def _counted(values: Any) -> dict[str, int]:
    counts = Counter(values)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def mode_rows(modes: ModeSet) -> list[dict[str, Any]]:
    """The modes as JSON rows, largest first, with their share of the runs."""
    total = sum(m.size for m in modes.modes) or 1
    return [{**m.as_dict(), "share": round(m.size / total, 4)} for m in modes.modes]


def isclose_ids(a: ModeSet, b: ModeSet) -> float:
    """The share of runs of ``a`` whose mode id is the same in ``b`` (a stability check)."""
    shared = [r for r in a.assignment if r in b.assignment]
    if not shared:
        return math.nan
    return sum(a.assignment[r] == b.assignment[r] for r in shared) / len(shared)
