"""The `+M` emulator-flag grammar of erts_alloc: parse, validate, render, and resolve.

Facts come from docs/erts/alloc_util.md (cited as §n). Three layers:

* :func:`parse` turns a flag string (``"+MBas aoffcbf +MBlmbcs 512 +MMmcs 20 +Mea max"``) or a
  token list into a :class:`FlagSet`: an ordered tuple of :class:`Flag` (target letter, parameter,
  typed value; sizes in **bytes**). Invalid input raises :class:`FlagError` with one clear line.
* :meth:`FlagSet.render` writes a canonical string that re-parses to the same effect.
* :func:`effective_config` resolves a FlagSet against the OTP 25 defaults (§2.3) for a scheduler
  count, applying the ordering rules of §2.1, and returns one :class:`AllocatorConfig` per
  alloc_util allocator, with options in bytes as ``erlang:system_info({allocator, A})`` shows them.
  :func:`effective_globals` does the same for mseg_alloc, sys_alloc and the alloc_util-wide flags.

Order matters in erts (§2.1): ``+MBas bf`` zeroes acul, and a *later* non-zero acul forces
``aoffcbf`` back. The FlagSet keeps the order given; rendering emits parameters in a fixed order
(``e t as`` before ``ac*``) with the values that order-dependent processing left in each field, so
the canonical string has the same effect as the original.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from beamalloc.limits import MAX_SCHEDULERS
from beamalloc.snapshot import UINT64_MAX

__all__ = [
    "ALLOCATORS",
    "ALLOCATOR_LETTERS",
    "STRATEGIES",
    "U_LETTERS",
    "AllocatorConfig",
    "Flag",
    "FlagError",
    "FlagErrorKind",
    "FlagSet",
    "GlobalConfig",
    "effective_config",
    "effective_globals",
    "parse",
    "replay_config",
]

FlagValue = int | bool | str

KB = 1024
MB = 1024 * 1024
#: `~0` on 64-bit: erts prints "infinite" sizes and counts as this number (§2.3, §6.4).
UINT_MAX = UINT64_MAX  # one home: beamalloc/snapshot.py (readers map a 32-bit ~0 to it)
#: OTP releases whose defaults are modelled; 25–27 differ only in atag size (§2.5).
SUPPORTED_OTP = (25, 26, 27)


#: Why a flag was refused: "invalid" (erts would reject it on any release), or "release" (the
#: target release lacks it: added later, or removed). The lint sorts by it, never by the text.
FlagErrorKind = Literal["invalid", "release"]


class FlagError(ValueError):
    """A `+M` flag string that erts would reject, or that beamalloc cannot model."""

    def __init__(self, message: str, kind: FlagErrorKind = "invalid") -> None:
        super().__init__(message)
        self.kind: FlagErrorKind = kind


# --- allocators --------------------------------------------------------------------------------

#: alloc_util allocators: letter -> (name, ERTS_ALC_A_* number) (§1, §2).
ALLOCATORS: dict[str, tuple[str, int]] = {
    "T": ("temp_alloc", 2),
    "S": ("sl_alloc", 3),
    "D": ("std_alloc", 4),
    "L": ("ll_alloc", 5),
    "H": ("eheap_alloc", 6),
    "E": ("ets_alloc", 7),
    "F": ("fix_alloc", 8),
    "I": ("literal_alloc", 9),
    "B": ("binary_alloc", 10),
    "R": ("driver_alloc", 11),
    "Z": ("test_alloc", 12),
}
ALLOCATOR_LETTERS: dict[str, str] = {name: letter for letter, (name, _) in ALLOCATORS.items()}
#: `+Mu…` reaches these and only these (§2: not temp, literal, test).
U_LETTERS = ("B", "D", "E", "H", "L", "R", "F", "S")
#: Carrier migration (ac*, cp) is refused for these (§2.1).
NO_MIGRATION = ("T", "I")
#: Targets that are not alloc_util allocators.
OTHER_TARGETS = ("M", "Y")

STRATEGIES = (
    "bf", "aobf", "aoff", "aoffcbf", "aoffcaobf", "ageffcaoff", "ageffcbf", "ageffcaobf", "gf",
    "af",
)  # fmt: skip
#: Strategies that support carrier migration (§2.1, §4.3).
AOFF_FAMILY = frozenset({"aoff", "aoffcbf", "aoffcaobf", "ageffcaoff", "ageffcbf", "ageffcaobf"})
CARRIER_POOLS = "BDEFHLRS@:"


# --- parameter table ---------------------------------------------------------------------------

Kind = Literal["kb", "mb", "int", "pct", "bool", "strategy", "acpct", "pool", "enum", "dai", "any"]


@dataclass(frozen=True)
class ParamSpec:
    kind: Kind
    choices: tuple[str, ...] = ()
    min: int = 0
    since: int = 0  # first OTP release that knows the flag


_AU = {
    "as": ParamSpec("strategy"),
    "sbct": ParamSpec("kb"),
    "lmbcs": ParamSpec("kb"),
    "smbcs": ParamSpec("kb"),
    "mbcgs": ParamSpec("int"),
    "mmbcs": ParamSpec("kb"),
    "mmsbc": ParamSpec("int"),
    "mmmbc": ParamSpec("int"),
    "rsbcst": ParamSpec("pct"),
    "asbcst": ParamSpec("kb"),
    "rsbcmt": ParamSpec("pct"),
    "rmbcmt": ParamSpec("pct"),
    "ramv": ParamSpec("bool"),
    "atags": ParamSpec("bool"),
    "acul": ParamSpec("acpct"),
    "acful": ParamSpec("acpct"),
    "acnl": ParamSpec("int"),
    "acfml": ParamSpec("int"),
    "cp": ParamSpec("pool"),
    "mbsd": ParamSpec("int", min=1),
    "e": ParamSpec("bool"),
    "t": ParamSpec("bool"),
}
_PARAMS: dict[str, dict[str, ParamSpec]] = {
    **{letter: _AU for letter in ALLOCATORS if letter != "I"},
    "I": {**_AU, "scs": ParamSpec("mb")},
    # madtn (erts 16.1, OTP 28.1, OTP-19739) is newer than the modelled releases, so parsed for
    # any; its release gate is the lint's, by erts version (advice/lint.py).
    "u": {**_AU, "ycs": ParamSpec("kb"), "mmc": ParamSpec("int"), "sac": ParamSpec("bool"),
          "madtn": ParamSpec("bool")},
    "M": {  # §2.2
        "mcs": ParamSpec("int"),
        "amcbf": ParamSpec("kb"),
        "rmcbf": ParamSpec("int"),
        "scs": ParamSpec("mb"),
        "sco": ParamSpec("bool"),
        "scrpm": ParamSpec("bool"),
        "scrfsd": ParamSpec("int"),
        "lp": ParamSpec("enum", ("on", "off"), since=27),
    },
    "Y": {
        "e": ParamSpec("bool"),
        "m": ParamSpec("any"),
        "tt": ParamSpec("kb"),
        "tp": ParamSpec("kb"),
    },
    "": {
        "ea": ParamSpec("enum", ("min", "max", "r9c", "r10b", "r11b", "config")),
        "lpm": ParamSpec("enum", ("all", "no")),
        "dai": ParamSpec("dai"),
    },
}
_U_ONLY = ("ycs", "mmc", "sac", "madtn")


def param_kind(target: str, param: str) -> str | None:
    """The kind of `+M<target><param>` ("kb", "mb", "pct", "acpct", "int", "bool", "enum", ...),
    or None when erts has no such parameter: how its value reads and is held."""
    spec = _PARAMS.get(target, {}).get(param)
    return spec.kind if spec is not None else None

#: Canonical rendering order. Within one allocator, `e t as` must precede `ac*` (§2.1).
_AU_ORDER = (
    "e", "t", "as", "atags", "ramv", "sbct", "asbcst", "rsbcst", "rsbcmt", "rmbcmt", "mmbcs",
    "mmmbc", "mmsbc", "lmbcs", "smbcs", "mbcgs", "mbsd", "acul", "acful", "acnl", "acfml", "cp",
)  # fmt: skip
_TARGET_ORDER = ("B", "D", "E", "F", "H", "I", "L", "R", "S", "T", "Z")


# --- flags ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flag:
    """One `+M<target><param> <value>` setting. Sizes are held in bytes.

    ``target`` is an allocator letter (``B``…``Z``), ``M`` (mseg_alloc), ``Y`` (sys_alloc), ``u``
    (all of :data:`U_LETTERS`, plus the alloc_util-wide ``ycs mmc sac``) or ``""`` for the global
    flags ``ea lpm dai``.
    """

    target: str
    param: str
    value: FlagValue

    @property
    def name(self) -> str:
        return f"+M{self.target}{self.param}"

    def value_text(self) -> str:
        """The value as erts takes it (KiB or MiB for sizes)."""
        return _render_value(_PARAMS[self.target][self.param], self.value)

    def render(self) -> str:
        return f"{self.name} {self.value_text()}"

    def __str__(self) -> str:
        return self.render()


def _render_value(spec: ParamSpec, value: FlagValue) -> str:
    if spec.kind == "bool":
        return "true" if value else "false"
    if spec.kind == "kb" and isinstance(value, int):
        return str(value // KB)
    if spec.kind == "mb" and isinstance(value, int):
        return str(value // MB)
    return str(value)


_INT_RE = re.compile(r"[0-9]+")


def _parse_int(name: str, text: str, lo: int = 0, hi: int = UINT_MAX) -> int:
    if not _INT_RE.fullmatch(text):
        raise FlagError(f"bad value {text!r} for {name}: expected a non-negative integer")
    value = int(text)
    if not lo <= value <= hi:
        raise FlagError(f"bad value {text!r} for {name}: expected {lo}..{hi}")
    return value


def _parse_value(target: str, param: str, text: str) -> FlagValue:
    spec = _PARAMS[target][param]
    name = f"+M{target}{param}"
    kind = spec.kind
    if kind == "kb":  # get_kb_value: KB in, bytes kept (§2)
        return _parse_int(name, text, hi=UINT_MAX // KB) * KB
    if kind == "mb":
        return _parse_int(name, text, hi=UINT_MAX // MB) * MB
    if kind in ("int", "pct"):
        # rsbcst/rsbcmt/rmbcmt above 100 are accepted and clamped by erts (§2.1).
        return _parse_int(name, text, lo=spec.min)
    if kind == "bool":
        if text not in ("true", "false"):
            raise FlagError(f"bad value {text!r} for {name}: expected true or false")
        return text == "true"
    if kind == "strategy":
        allowed = STRATEGIES if target in ("T", "u") else STRATEGIES[:-1]
        if text not in allowed:
            hint = " (af is accepted for temp_alloc only, §4.5)" if text == "af" else ""
            raise FlagError(
                f"bad value {text!r} for {name}: expected one of {' '.join(allowed)}{hint}"
            )
        return text
    if kind == "acpct":
        return "de" if text == "de" else _parse_int(name, text, hi=100)
    if kind == "pool":
        if len(text) != 1 or text not in CARRIER_POOLS:
            raise FlagError(
                f"bad value {text!r} for {name}: expected one of {' '.join(CARRIER_POOLS)}"
            )
        return text
    if kind == "enum":
        if text not in spec.choices:
            raise FlagError(f"bad value {text!r} for {name}: expected {'|'.join(spec.choices)}")
        return text
    if kind == "dai":
        return "max" if text == "max" else _parse_int(name, text)
    return text  # "any": +MYm is ignored by erts


def _check_allowed(flag: Flag, otp: int) -> None:
    t, p, v = flag.target, flag.param, flag.value
    spec = _PARAMS[t][p]
    if spec.since > otp:
        raise FlagError(f"{flag.name} needs OTP {spec.since} or later (target is OTP {otp})",
                        "release")
    if t in NO_MIGRATION and (p.startswith("ac") or p == "cp"):
        raise FlagError(f"{flag.name}: carrier migration is not allowed for {ALLOCATORS[t][0]}")
    if t in NO_MIGRATION and p == "e" and v is False:
        raise FlagError(f"{flag.name}: {ALLOCATORS[t][0]} cannot be disabled")
    if t == "Y" and p == "e" and v is False:
        raise FlagError("+MYe: sys_alloc cannot be disabled")
    if t == "" and p == "ea" and v == "config" and otp >= 26:
        raise FlagError("+Mea config was removed in OTP 26", "release")


def _split_flag(token: str) -> tuple[str, str, str | None]:
    """Split ``+MBasaoffcbf`` / ``+MBas`` into (target, param, attached value or None)."""
    body = token[2:]
    if body[:1] in ALLOCATORS or body[:1] in ("M", "Y", "u"):
        target, rest = body[0], body[1:]
    elif body[:1].isupper():
        raise FlagError(f"unknown allocator letter {body[0]!r} in {token!r}")
    else:
        target, rest = "", body
    params = _PARAMS[target]
    if rest in params:
        return target, rest, None
    # erts also takes the value glued to the parameter (`get_value`); prefer the longest name.
    for name in sorted(params, key=len, reverse=True):
        if rest.startswith(name):
            return target, name, rest[len(name) :]
    what = ALLOCATORS[target][0] if target in ALLOCATORS else f"+M{target}"
    raise FlagError(f"unknown parameter {rest!r} in {token!r} (for {what})")


def parse(flags: str | Sequence[str], *, otp: int = 25) -> FlagSet:
    """Parse ``+M`` flags from a string or a token list; raise :class:`FlagError` if invalid.

    Only ``+M`` flags are accepted; pass other emulator flags elsewhere.
    """
    tokens = flags.split() if isinstance(flags, str) else list(flags)
    if otp not in SUPPORTED_OTP:
        raise FlagError(
            f"OTP {otp} is not modelled (supported: {', '.join(map(str, SUPPORTED_OTP))})"
        )
    out: list[Flag] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("+M") or len(token) < 3:
            raise FlagError(f"unexpected {token!r}: expected a +M<S><P> flag")
        target, param, text = _split_flag(token)
        if not text:
            if i + 1 >= len(tokens) or tokens[i + 1].startswith("+"):
                raise FlagError(f"{token} expects a value")
            i += 1
            text = tokens[i]
        flag = Flag(target, param, _parse_value(target, param, text))
        _check_allowed(flag, otp)
        out.append(flag)
        i += 1
    return FlagSet(tuple(out), otp=otp)


# --- flag sets -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlagSet:
    """An ordered set of ``+M`` flags as given (order matters in erts, §2.1)."""

    flags: tuple[Flag, ...] = ()
    otp: int = 25

    @classmethod
    def parse(cls, flags: str | Sequence[str], *, otp: int = 25) -> FlagSet:
        return parse(flags, otp=otp)

    def __iter__(self):
        return iter(self.flags)

    def __len__(self) -> int:
        return len(self.flags)

    def __add__(self, other: FlagSet | Iterable[Flag]) -> FlagSet:
        more = other.flags if isinstance(other, FlagSet) else tuple(other)
        return FlagSet(self.flags + more, otp=self.otp)

    def for_allocator(self, letter: str) -> list[Flag]:
        """The flags that reach allocator ``letter``, in order, with ``u`` and ``ea`` expanded.

        ``+Mea min|max`` becomes an ``e false|true`` flag for each ``u`` allocator.
        """
        out: list[Flag] = []
        for f in self.flags:
            if f.target == letter:
                out.append(f)
            elif f.target == "u" and letter in U_LETTERS and f.param not in _U_ONLY:
                out.append(Flag(letter, f.param, f.value))
            elif (
                f.target == ""
                and f.param == "ea"
                and letter in U_LETTERS
                and f.value
                in (
                    "min",
                    "max",
                )
            ):
                out.append(Flag(letter, "e", f.value == "max"))
        return out

    def fields(self) -> dict[str, dict[str, FlagValue]]:
        """Explicit settings per target after order-dependent processing (§2.1).

        ``as`` with a strategy outside the aoff family and ``t false`` set acul and acful to 0,
        as erts does; ``+Mea`` is kept under target ``""`` and clears earlier ``e``.
        """
        out: dict[str, dict[str, FlagValue]] = {}
        for f in self.flags:
            if f.target == "u" and f.param not in _U_ONLY:
                for letter in U_LETTERS:
                    _apply_field(letter, out.setdefault(letter, {}), f.param, f.value)
            else:
                if f.target == "" and f.param == "ea":
                    for letter in U_LETTERS:
                        out.get(letter, {}).pop("e", None)
                _apply_field(f.target, out.setdefault(f.target, {}), f.param, f.value)
        return {t: d for t, d in out.items() if d}

    def canonical(self) -> list[Flag]:
        """The flags in canonical order: fixed order, last value wins, ``u`` where all eight
        agree (what :meth:`render` prints, one Flag each)."""
        fields = self.fields()
        for d in fields.values():
            # Drop acul/acful zeros that the rendered `as`/`t` (which come first) reproduce.
            if any(_zeroes_acul(p, d[p]) for p in ("as", "t") if p in d):
                for p in ("acul", "acful"):
                    if d.get(p) == 0:
                        del d[p]
        parts: list[Flag] = []

        def emit(target: str, param: str) -> None:
            if param in fields.get(target, {}):
                parts.append(Flag(target, param, fields[target][param]))

        for param in ("ea", "lpm", "dai"):
            emit("", param)
        for param in _U_ONLY:
            emit("u", param)
        for param in _AU_ORDER:
            values = [fields.get(letter, {}).get(param) for letter in U_LETTERS]
            collapse = values[0] is not None and all(v == values[0] for v in values)
            if collapse:
                parts.append(Flag("u", param, values[0]))  # type: ignore[arg-type]
            for letter in _TARGET_ORDER:
                if not (collapse and letter in U_LETTERS):
                    emit(letter, param)
        emit("I", "scs")
        for param in _PARAMS["M"]:
            emit("M", param)
        for param in _PARAMS["Y"]:
            emit("Y", param)
        return parts

    def render(self) -> str:
        """Canonical flag string: fixed order, last value wins, ``u`` where all eight agree."""
        return " ".join(f.render() for f in self.canonical())

    def __str__(self) -> str:
        return self.render()


def _apply_field(target: str, d: dict[str, FlagValue], param: str, value: FlagValue) -> None:
    d[param] = value
    # §2.1: a non-migrating strategy, or `t false`, switches carrier migration off; the zero
    # stays even if a later `as`/`t` changes its mind, so it is recorded as a field value.
    if _zeroes_acul(param, value) and target not in NO_MIGRATION:
        d["acul"] = d["acful"] = 0


def _zeroes_acul(param: str, value: FlagValue) -> bool:
    return (param == "as" and value not in AOFF_FAMILY) or (param == "t" and value is False)


# --- effective configuration ---------------------------------------------------------------------


@dataclass(frozen=True)
class AllocatorConfig:
    """Options in force for one alloc_util allocator, in bytes, as ``system_info`` shows them.

    These are the values of the scheduler instances (1..S). :meth:`for_instance` gives the
    view of instance 0 (and dirty instances), which never has a carrier pool (§2.3).
    """

    name: str
    letter: str
    number: int
    e: bool
    t: bool  # thread-preferred instances (temp_alloc: thread-specific)
    instances: int  # how many Allctr_t instances exist (0 when disabled)
    atags: bool
    ramv: bool
    sbct: int
    asbcst: int
    rsbcst: int
    rsbcmt: int
    rmbcmt: int
    mmbcs: int
    mmmbc: int
    mmsbc: int
    lmbcs: int
    smbcs: int
    mbcgs: int
    acful: int
    acul: int
    acnl: int
    acfml: int
    cp: str | None  # carrier pool letter; None = "undefined" (no pool)
    mbsd: int
    strategy: str  # option `as`
    instance: int = 1
    main_carrier: bool = True  # whether this instance starts with a main MBC (§1)

    @property
    def pool_enabled(self) -> bool:
        """Carrier pool on for this instance: `!ts && acul && acnl && cp` (§5)."""
        return self.acul > 0 and self.acnl > 0 and self.cp is not None

    def for_instance(self, ix: int, *, schedulers: int | None = None) -> AllocatorConfig:
        """Options of instance ``ix``: 0 (and dirty instances > ``schedulers``) lose the pool."""
        threadsafe = ix == 0 or (schedulers is not None and ix > schedulers)
        if not threadsafe:
            return dataclasses.replace(self, instance=ix)
        strategy = "gf" if self.letter == "T" and self.strategy == "af" else self.strategy  # §4.5
        # ets_alloc instance 0 has no main carrier (`mmbc0 = 0`, §1, §2.3).
        main = self.main_carrier and not (self.letter == "E" and ix == 0)
        return dataclasses.replace(
            self, instance=ix, acul=0, acful=0, acnl=0, cp=None, strategy=strategy,
            main_carrier=main,
        )  # fmt: skip

    def options(self) -> list[tuple[str, Any]]:
        """The ``options`` list of ``erlang:system_info({allocator, A})`` (§6.1), in its order."""
        opts: list[tuple[str, Any]] = [
            ("e", self.e), ("t", self.t), ("atags", self.atags), ("ramv", self.ramv),
            ("sbct", self.sbct), ("asbcst", self.asbcst), ("rsbcst", self.rsbcst),
            ("rsbcmt", self.rsbcmt), ("rmbcmt", self.rmbcmt), ("mmbcs", self.mmbcs),
            ("mmmbc", self.mmmbc), ("mmsbc", self.mmsbc), ("lmbcs", self.lmbcs),
            ("smbcs", self.smbcs), ("mbcgs", self.mbcgs), ("acful", self.acful),
            ("acul", self.acul), ("acnl", self.acnl), ("acfml", self.acfml),
            ("cp", self.cp if self.cp is not None else "undefined"),
        ]  # fmt: skip
        if self.strategy == "gf":
            opts.append(("mbsd", self.mbsd))
        opts.append(("as", self.strategy))
        return opts

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class GlobalConfig:
    """Non-per-allocator settings (§2.2): mseg_alloc, erts_mmap, alloc_util-wide, sys_alloc."""

    mcs: int = 10
    amcbf: int = 4096 * KB
    rmcbf: int = 20
    scs: int = 0
    sco: bool = True
    scrpm: bool = True
    scrfsd: int = 65536
    lp: str = "off"
    literal_scs: int = 1024 * MB
    ycs: int = 1024 * KB
    mmc: int = UINT_MAX
    sac: bool = True
    madtn: bool = False  # MADV_DONTNEED for acful's discards (not modelled: no carrier changes)
    tt: int = 128 * KB
    tp: int = 0
    lpm: str = "no"
    dai: int = 0  # dirty-scheduler allocator instances
    ea: str = "max"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# Raw OTP 25 defaults (§2.3), before flags and scheduler scaling. Strategy is the nominal one;
# `acul` here is the "default enabled" value (`de`).
_GENERIC = dict(
    e=True, t=True, atags=False, ramv=False, sbct=512 * KB, asbcst=4_145_152, rsbcst=20,
    rsbcmt=80, rmbcmt=50, mmbcs=128 * KB, mmmbc=UINT_MAX, mmsbc=256, lmbcs=10 * MB,
    smbcs=1 * MB, mbcgs=10, acful=0, acul=60, acnl=1000, acfml=0, mbsd=3,
)  # fmt: skip
_NO_SBC = dict(sbct=UINT_MAX, rsbcst=0, asbcst=0, rsbcmt=0, rmbcmt=0, mmsbc=0)
_DEFAULTS: dict[str, dict[str, Any]] = {
    "T": dict(_GENERIC, strategy="af", rsbcst=90, rmbcmt=100, acul=0),
    "S": dict(_GENERIC, strategy="gf", rsbcst=80),
    "D": dict(_GENERIC, strategy="bf"),
    # ll_alloc is nominally thread-safe (thr_spec 0); its default acul makes it thread-preferred.
    "L": dict(_GENERIC, **_NO_SBC, strategy="aobf", mmbcs=2 * MB, acul=85, t=False),
    "H": dict(_GENERIC, strategy="gf", mmbcs=512 * KB, rsbcst=50, acul=45),
    "E": dict(_GENERIC, strategy="bf"),
    "F": dict(_GENERIC, strategy="aobf"),
    "I": dict(_GENERIC, **_NO_SBC, strategy="aobf", mmbcs=1 * MB, acul=0, t=False),
    "B": dict(_GENERIC, strategy="bf", atags=True),
    "R": dict(_GENERIC, strategy="bf", atags=True),
    "Z": dict(
        _GENERIC,
        e=False,
        strategy="aoffcbf",
        mmbcs=0,
        smbcs=16 * KB,
        lmbcs=16 * KB,
        sbct=16 * KB,
        atags=True,
    ),
}
_SCALED = ("mmbcs", "smbcs", "lmbcs")


def _as_flagset(flags: FlagSet | str | Sequence[str] | None, otp: int) -> FlagSet:
    if flags is None:
        return FlagSet(otp=otp)
    if isinstance(flags, FlagSet):
        return flags
    return parse(flags, otp=otp)


def effective_globals(
    flags: FlagSet | str | Sequence[str] | None = None,
    schedulers: int = 1,
    *,
    dirty_cpu_schedulers: int | None = None,
    otp: int = 25,
) -> GlobalConfig:
    """The non-per-allocator settings in force (§2.2), in bytes."""
    fs = _as_flagset(flags, otp)
    values: dict[str, Any] = {}
    for f in fs:
        if f.target == "M":
            values["scs" if f.param == "scs" else f.param] = f.value
        elif f.target == "I" and f.param == "scs":
            values["literal_scs"] = f.value
        elif (
            (f.target == "u" and f.param in _U_ONLY)
            or (f.target == "Y" and f.param in ("tt", "tp"))
            or f.target == ""
        ):
            values[f.param] = f.value
    if "mcs" in values:
        values["mcs"] = min(int(values["mcs"]), 30)  # §2.2: clamped to 30
    if "ycs" in values:
        values["ycs"] = _ceil(int(values["ycs"]), 16 * KB)  # §2.2: 16 KB unit
    if values.get("dai") == "max":
        values["dai"] = schedulers if dirty_cpu_schedulers is None else dirty_cpu_schedulers
    return GlobalConfig(**values)


def effective_config(
    flags: FlagSet | str | Sequence[str] | None = None,
    schedulers: int = 1,
    *,
    dirty_cpu_schedulers: int | None = None,
    otp: int = 25,
) -> dict[str, AllocatorConfig]:
    """Options in force per alloc_util allocator (name -> config) for an OTP 25 node.

    Applies, in this order: the raw defaults (§2.3), the flags as given with their ordering
    rules (§2.1), `de` values, `adjust_carrier_migration_support` (non-zero acul forces the aoff
    family and thread-preferred instances), clamps, and the per-scheduler scaling of
    mmbcs/smbcs/lmbcs for thread-preferred allocators that did not set them explicitly.
    """
    if not (isinstance(schedulers, int) and 1 <= schedulers <= MAX_SCHEDULERS):
        # The VM's own limit (erl +S); 10^9 instances would take the machine's memory.
        raise FlagError(f"schedulers must be 1 to {MAX_SCHEDULERS}, got {schedulers}")
    fs = _as_flagset(flags, otp)
    dai = effective_globals(fs, schedulers, dirty_cpu_schedulers=dirty_cpu_schedulers).dai
    return {ALLOCATORS[letter][0]: _resolve(letter, fs, schedulers, dai) for letter in ALLOCATORS}


def _resolve(letter: str, fs: FlagSet, schedulers: int, dai: int) -> AllocatorConfig:
    name, number = ALLOCATORS[letter]
    raw = dict(_DEFAULTS[letter])
    de_acul = raw["acul"]
    raw["acul"] = 0 if letter in NO_MIGRATION else de_acul
    explicit: set[str] = set()
    for f in fs.for_allocator(letter):
        key = "strategy" if f.param == "as" else f.param
        if key == "scs":
            continue
        raw[key] = f.value
        explicit.add(key)
        if (key == "strategy" and f.value not in AOFF_FAMILY) or (key == "t" and f.value is False):
            raw["acul"] = raw["acful"] = 0  # §2.1
    for ea in (f for f in fs if f.target == "" and f.param == "ea"):
        if ea.value in ("r9c", "r10b", "r11b", "config"):
            raise FlagError(f"+Mea {ea.value}: legacy configurations are not modelled")

    if raw["acul"] == "de":
        raw["acul"] = de_acul
    # adjust_carrier_migration_support (§2.1): pool needs the aoff family and tpref instances.
    if raw["acul"] and letter not in NO_MIGRATION:
        if raw["strategy"] not in AOFF_FAMILY:
            raw["strategy"] = "aoffcbf"
        raw["t"] = True
    if raw["acful"] == "de":
        raw["acful"] = max(int(raw["acul"]) - 20, 0)
    raw["acful"] = min(int(raw["acful"]), int(raw["acul"]))
    for p in ("rsbcst", "rsbcmt", "rmbcmt"):
        raw[p] = min(int(raw[p]), 100)
    raw["mbcgs"] = max(int(raw["mbcgs"]), 1)

    thread_pref = bool(raw["t"]) and letter not in ("T", "I")
    if thread_pref:  # adjust_tpref (§2.1, §2.3 "Effective values after scaling")
        divisors = {"mmbcs": min(4, schedulers), "smbcs": min(4, schedulers),
                    "lmbcs": min(2, schedulers)}  # fmt: skip
        for p in _SCALED:
            if p not in explicit:
                raw[p] = int(raw[p]) // divisors[p]
    if letter == "I":
        raw["t"] = False  # one thread-safe instance (§2.3)
    if not raw["acul"] or letter in NO_MIGRATION:
        # No pool: erts reports acnl 0 and cp undefined, as for instance 0 (§2.3).
        raw["acnl"] = 0
        cp = None
    else:
        cp_given = raw.get("cp")
        cp = letter if cp_given in (None, ":") else str(cp_given)  # ':' = own pool
    if letter == "T":
        instances = schedulers + 1  # thread-specific, never pooled
    elif raw["t"]:
        instances = schedulers + 1 + dai
    else:
        instances = 1
    enabled = bool(raw["e"])
    return AllocatorConfig(
        name=name, letter=letter, number=number, e=enabled, t=bool(raw["t"]) or letter == "T",
        instances=instances if enabled else 0, atags=bool(raw["atags"]), ramv=bool(raw["ramv"]),
        sbct=int(raw["sbct"]), asbcst=int(raw["asbcst"]), rsbcst=int(raw["rsbcst"]),
        rsbcmt=int(raw["rsbcmt"]), rmbcmt=int(raw["rmbcmt"]), mmbcs=int(raw["mmbcs"]),
        mmmbc=int(raw["mmmbc"]), mmsbc=int(raw["mmsbc"]), lmbcs=int(raw["lmbcs"]),
        smbcs=int(raw["smbcs"]), mbcgs=int(raw["mbcgs"]), acful=int(raw["acful"]),
        acul=int(raw["acul"]), acnl=int(raw["acnl"]), acfml=int(raw["acfml"]), cp=cp,
        mbsd=int(raw["mbsd"]), strategy=str(raw["strategy"]),
        main_carrier=int(raw["mmbcs"]) > 0,
    )  # fmt: skip


def replay_config(
    flags: FlagSet | str | Sequence[str] | None = None,
    schedulers: int = 1,
    *,
    dirty_cpu_schedulers: int | None = None,
    otp: int = 25,
) -> dict[str, Any]:
    """Everything refalloc needs, JSON-ready: globals plus per-allocator, per-instance options."""
    fs = _as_flagset(flags, otp)
    glob = effective_globals(fs, schedulers, dirty_cpu_schedulers=dirty_cpu_schedulers, otp=otp)
    allocs = effective_config(fs, schedulers, dirty_cpu_schedulers=dirty_cpu_schedulers, otp=otp)
    return {
        "otp": fs.otp,
        "schedulers": schedulers,
        "flags": fs.render(),
        "globals": glob.to_dict(),
        "allocators": {
            name: [
                cfg.for_instance(ix, schedulers=schedulers).to_dict() for ix in range(cfg.instances)
            ]
            for name, cfg in allocs.items()
        },
    }


def _ceil(value: int, unit: int) -> int:
    return -(-value // unit) * unit
