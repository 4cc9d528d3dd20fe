"""The recommendation's typed records: built once by advice/recommend.py, rendered by
advice/wording.py for the terminal, the web pages and the HTML report, serialised by their own
`to_json()` for `recommend --json` (schema `beamalloc.recommend/2`, docs/recommend.md).

Records hold states, codes and numbers, never sentences made for a reader: a reason is a code
with its numbers (`Reason`), and only the wording module turns it into words. A prediction keeps
the predictor's dict (advice/predict.py) as its serialisation and reads the fields the verdict
decides by, and the figures the pages show (`Replayed`), into typed attributes; fields a
predictor does not give yet read None. Flags stay typed (beamalloc/flags.py `Flag`, `FlagSet`:
a finding's candidates, `Found`; a held-back finding's): rendered only where said, never
parsed back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from beamalloc.advice.findings import Finding
    from beamalloc.flags import Flag, FlagSet

#: A memory flag must be predicted to remove at least this share of its allocator's unused
#: bytes: less is not worth restarting a production node for [heur]. The one gain floor.
MIN_GAIN = 0.20

HEALTHY, CHANGE, IN_FORCE, NO_FLAG = "HEALTHY", "CHANGE FLAGS", "FLAGS IN FORCE", "NO FLAG HELPS"
#: Mostly empty, and what the flags would do is not known from this input: the model does not
#: reproduce the node, or the futures one snapshot cannot tell apart lie on both sides of the
#: gain floor. Said as such, with what tells (issue 22 items 2, 3): never a NO FLAG HELPS that
#: its own why line contradicts.
UNDECIDED = "UNDECIDED"
#: Reason codes that leave an allocator UNDECIDED rather than NO FLAG HELPS.
UNKNOWN_REASONS = ("not_reproduced", "futures_differ")


def unknown(r: Reason) -> bool:
    """Does this reason for holding flags back leave their effect unknown? Also a worst case
    below the floor whose best case (stragglers, which only the carrier map shows) is above."""
    return r.code in UNKNOWN_REASONS or (r.code == "below_gain"
                                         and r.numbers.get("best") is not None)
STATES = (HEALTHY, CHANGE, IN_FORCE, NO_FLAG, UNDECIDED)


@dataclass(frozen=True)
class Reason:
    """Why the verdict or a flag is what it is: a code (docs/recommend.md, "Reason codes") and
    the numbers it is about. advice/wording.py says it."""

    code: str
    numbers: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, **self.numbers}


@dataclass(frozen=True)
class Calibration:
    """How well the model under the flags in force reproduces the node now: `error` is the
    relative error of the replayed unused bytes against the node's (0.04 = 4 %), `tolerance`
    the most the predictor accepts, `reproduces` whether it did."""

    tolerance: float | None
    error: float | None
    reproduces: bool | None
    measures: dict[str, Any]

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Calibration | None:
        if not isinstance(d, dict):
            return None
        return cls(d.get("tolerance"), d.get("error"), d.get("reproduces"),
                   dict(d.get("measures") or {}))  # fmt: skip


@dataclass(frozen=True)
class Future:
    """One reading of what a snapshot cannot know: `turnover` (the survivors are replaced by
    churn) or `kept` (they stay), with the saving the flags give under it."""

    name: str
    assumes: str
    unused_saving: float | None
    band: tuple[float, float] | None
    calibration: Calibration | None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Future:
        band = d.get("band")
        if isinstance(band, dict):
            band = band.get("unused_saving")
        return cls(str(d.get("name")), str(d.get("assumes") or ""), d.get("unused_saving"),
                   tuple(band) if band else None,  # type: ignore[arg-type]
                   Calibration.from_dict(d.get("calibration")))  # fmt: skip


@dataclass(frozen=True)
class Measures:
    """A replay's figures at its end, in the trace's bytes (advice/predict.py `_figures`); a
    figure the predictor did not give reads None."""

    carriers_size: int | None
    peak_carriers_size: int | None
    unused: int | None
    carrier_calls: int | None

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Measures:
        d = d or {}
        return cls(d.get("carriers_size"), d.get("peak_carriers_size"), d.get("unused"),
                   d.get("carrier_calls"))  # fmt: skip


@dataclass(frozen=True)
class Model:
    """The workload a prediction replayed: its generator, events, the scale of the trace
    against the node (1.0: the node's size) and what it was fitted to."""

    generator: str
    events: int
    scale: float
    fitted_to: str | None

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Model:
        d = d or {}
        return cls(str(d.get("generator") or "?"), int(d.get("events") or 0),
                   float(d.get("scale") if d.get("scale") is not None else 1.0),
                   d.get("fitted_to"))  # fmt: skip


@dataclass(frozen=True)
class Replayed:
    """One comparison: the trace replayed under the node's flags (`before`) and with the flags
    after them (`after`); `change_pct` per measure of Measures (a change in percent, -45.3;
    None where before is 0)."""

    model: Model
    before: Measures
    after: Measures
    change_pct: dict[str, float | None]
    unused_saving: float
    reproduces: bool  # the replay under the node's flags shows the node's symptom

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Replayed:
        return cls(Model.from_dict(d.get("model")), Measures.from_dict(d.get("before")),
                   Measures.from_dict(d.get("after")), dict(d.get("change_pct") or {}),
                   float(d.get("unused_saving") or 0.0),
                   bool(d.get("reproduces_symptom")))  # fmt: skip


@dataclass(frozen=True)
class Prediction:
    """What a replay predicts for some flags on one allocator (advice/predict.py's dict)."""

    allocator: str
    flags: str
    flags_before: str
    flags_after: str
    unused_saving: float
    band: tuple[float, float] | None  # of unused_saving, over the orders drawn
    seeded_from: str | None  # carriers, counters, history
    workload: str | None  # fitted, traced
    generator: str
    fidelity: float | None
    reproduces: bool  # the replay under the node's flags shows the node's symptom
    calibration: Calibration | None
    futures: tuple[Future, ...] | None
    known: str | None  # turnover, kept, or None where one snapshot cannot tell
    known_by: str | None
    best_case_saving: float | None  # counters only: the stragglers' reading, where it reproduces
    not_modelled: str | None
    #: the replay the figures come from, and the best case's (counters only: the stragglers'
    #: reading) whether or not it reproduces the node
    replayed: Replayed
    best_case: Replayed | None
    raw: dict[str, Any]
    node_unused: int | None = None  # the node's unused bytes the replay is held against
    #: the band as changes in percent of unused bytes (-60.0, -20.0), over `band_variants` draws
    band_pct: tuple[float, float] | None = None
    band_variants: int | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Prediction:
        cal = Calibration.from_dict(d.get("calibration"))
        band = (d.get("band") or {}).get("unused_saving")
        best = d.get("best_case") or {}
        futures = d.get("futures")
        reproduces = bool(d.get("reproduces_symptom"))
        if cal is not None and cal.reproduces is not None:
            reproduces = reproduces and bool(cal.reproduces)
        return cls(
            allocator=str(d.get("allocator")), flags=str(d.get("flags") or ""),
            flags_before=str(d.get("flags_before") or ""),
            flags_after=str(d.get("flags_after") or ""),
            unused_saving=float(d.get("unused_saving") or 0.0),
            band=tuple(band) if band else None,  # type: ignore[arg-type]
            seeded_from=d.get("seeded_from"), workload=d.get("workload"),
            generator=str((d.get("model") or {}).get("generator") or "?"),
            fidelity=d.get("fidelity"), reproduces=reproduces, calibration=cal,
            futures=tuple(Future.from_dict(x) for x in futures) if futures else None,
            known=d.get("known"), known_by=d.get("known_by"),
            best_case_saving=best.get("unused_saving") if best.get("reproduces_symptom")
            else None,
            not_modelled=d.get("not_modelled"), replayed=Replayed.from_dict(d),
            best_case=Replayed.from_dict(d["best_case"]) if d.get("best_case") else None,
            raw=d, node_unused=d.get("node_unused"),
            band_pct=tuple(pcts) if (pcts := (d.get("band") or {}).get("unused_pct"))
            else None,  # type: ignore[arg-type]
            band_variants=(d.get("band") or {}).get("variants"),
        )  # fmt: skip

    @property
    def calibration_error(self) -> float | None:
        """The predictor's calibration error where it gives one, else how far its replay under
        the node's own flags is from the node's unused bytes (|1 - fidelity|)."""
        if self.calibration is not None and self.calibration.error is not None:
            return float(self.calibration.error)
        return None if self.fidelity is None else abs(1 - float(self.fidelity))

    def effect(self) -> dict[str, Any]:
        """What a flag is advised on, in one place: the predicted effect on unused bytes, its
        band, the calibration error, where the model was seeded from and which workload ran."""
        return {"unused_saving": self.unused_saving,
                "band": list(self.band) if self.band else None,
                "calibration_error": self.calibration_error, "seeded_from": self.seeded_from,
                "workload": self.workload, "known": self.known}  # fmt: skip

    @property
    def summary(self) -> str:
        """The predictor's one line about its replay (advice/predict.py `summary`)."""
        return str(self.raw["summary"])

    def future(self, name: str) -> Future | None:
        return next((x for x in self.futures or () if x.name == name), None)

    def futures_differ(self) -> bool:
        """Two futures on either side of the gain floor, and nothing says which holds."""
        if self.known is not None or not self.futures:
            return False
        gains = [x.unused_saving for x in self.futures if x.unused_saving is not None]
        return len(gains) >= 2 and min(gains) < MIN_GAIN <= max(gains)

    def to_json(self) -> dict[str, Any]:
        """The predictor's own dict, with the fields the verdict reads always present."""
        out = dict(self.raw)
        for k in ("workload", "seeded_from", "calibration", "futures", "known", "known_by"):
            out.setdefault(k, None)
        return out


@dataclass(frozen=True)
class Recommendation:
    """One flag to set, with the evidence, cost and prediction it is advised on."""

    allocator: str
    flag: str  # +MBas
    value: str  # as erts takes it (KiB for sizes)
    rule: str
    sources: tuple[str, ...]
    reason: str
    evidence: dict[str, Any]
    cost: str
    trade_off: bool
    prediction: Prediction | None
    not_predicted: str | None
    #: the typed flag `flag` and `value` render, for code that asks which parameter it sets
    #: or its number (never the rendered text read back)
    setting: Flag | None = None

    def to_json(self) -> dict[str, Any]:
        return {"allocator": self.allocator, "flag": self.flag, "value": self.value,
                "rule": self.rule, "sources": list(self.sources), "reason": self.reason,
                "evidence": self.evidence, "cost": self.cost, "trade_off": self.trade_off,
                "effect": self.prediction.effect() if self.prediction else None,
                "predicted": self.prediction.to_json() if self.prediction else None,
                "not_predicted": self.not_predicted}  # fmt: skip


@dataclass(frozen=True)
class Proposal:
    """Every advised flag predicted together (advice/recommend.py `_predict_whole`): the set,
    rendered, and one run per allocator the advice is about."""

    flags: str
    runs: tuple[Prediction, ...]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Proposal:
        return cls(str(d.get("flags") or ""),
                   tuple(Prediction.from_dict(r) for r in d.get("runs") or ()))


class Found(NamedTuple):
    """A rule's finding as the recommendation judged it: its candidate flags (typed, in the
    rule's order, before the merge and the lint took any away) and their prediction, where the
    recommender replayed them."""

    finding: Finding
    candidates: FlagSet
    prediction: Prediction | None

    def candidate_flags(self) -> list[str]:
        """The candidates rendered one by one (`recommend --json`'s `candidate_flags`)."""
        return [f.render() for f in self.candidates]


@dataclass(frozen=True)
class HeldBack:
    """A finding whose flags were not advised, and why (a reason code with its numbers)."""

    rule: str
    allocator: str | None
    flags: tuple[Flag, ...]  # typed; rendered only where said
    reason: Reason
    trade_off: bool
    prediction: Prediction | None


@dataclass(frozen=True)
class Remedy:
    """What releases an allocator's unused bytes when no flag does: `code` names the action
    (docs/recommend.md), `releases` its bytes, `bound` whether that is at most (an upper bound)."""

    code: str
    releases: int
    releases_how: str
    sources: tuple[str, ...]
    bound: bool = False
    who: str | None = None  # the process it is about, for a holder's own remedy

    def to_json(self, action: str) -> dict[str, Any]:
        return {"code": self.code, "action": action, "releases": self.releases,
                "releases_how": self.releases_how, "bound": self.bound,
                "sources": list(self.sources)}  # fmt: skip


@dataclass(frozen=True)
class NoFlagEntry:
    """A mostly-empty allocator that no advised flag is for."""

    allocator: str
    unused: int
    allocated: int
    usage: float
    flags_in_force: tuple[Flag, ...]  # the node's own flags for it, where the rules' are set
    held_back: tuple[Reason, ...]
    classification: str | None
    cause: Reason  # carrier_map (kind, detail) or no_carrier_data
    pool: dict[str, int] | None  # carriers, allocated, used of the pool, where it has one
    remedies: tuple[Remedy, ...]
    held_by: tuple[dict[str, Any], ...] | None = None


@dataclass(frozen=True)
class Revert:
    """A setting in force that the lint calls wrong, weighed as advice: OTP's default for it,
    predicted. `advised` when its own prediction passes the gain floor."""

    allocator: str
    check: str  # the lint check (migration-off, lmbcs-sbct)
    flags_in_force: tuple[Flag, ...]  # typed; rendered by the wording (wording.flags_text)
    flags: tuple[Flag, ...]  # the revert: OTP's defaults for them
    prediction: Prediction | None
    not_predicted: str | None
    advised: bool


@dataclass(frozen=True)
class Total:
    unused: int
    allocated: int
    usage: float


@dataclass(frozen=True)
class FlagsInForce:
    flags: str | None  # None for a release not modelled
    options: dict[str, dict[str, Any]]
    release: str | None  # the OTP release where the source records one
    modelled: bool

    def to_json(self, note: str | None, text: str) -> dict[str, Any]:
        return {"flags": self.flags, "options": self.options, "note": note, "text": text,
                "release_known": self.release is not None, "modelled": self.modelled}


@dataclass(frozen=True)
class Verdict:
    """The answer: its state, the bytes at stake, what to do, and why (reason codes)."""

    state: str
    total: Total
    reasons: tuple[Reason, ...]  # first is the one the headline states
    advised: tuple[Recommendation, ...]
    held_back: tuple[HeldBack, ...]
    in_force: dict[str, tuple[Flag, ...]]  # allocator -> the rules' flags it already runs
    flags_in_force: FlagsInForce
    no_flag_helps: tuple[NoFlagEntry, ...]
    reverts: tuple[Revert, ...]
    holders: tuple[str, ...]
    rate: dict[str, Any] | None
    rate_unavailable: str | None
    rss: int | None = None
    rss_lazyfree: int | None = None
    truncated_instances: int | None = None  # instances read before the input's cut

    def revert_of(self, allocator: str | None, check: str) -> Revert | None:
        """The revert weighed for the lint's `check` on a setting in force of `allocator`."""
        return next((r for r in self.reverts if r.allocator == allocator and r.check == check),
                    None)

    @property
    def counts(self) -> dict[str, int]:
        return {"advised": len(self.advised),
                "trade_off": sum(1 for a in self.advised if a.trade_off),
                "held_back": sum(len(h.flags) for h in self.held_back),
                "in_force": sum(len(v) for v in self.in_force.values())}  # fmt: skip
