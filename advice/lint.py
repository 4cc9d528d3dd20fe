"""Lint `+M` flags: the ones in force (read from a snapshot's options) and any flag string
(the user's vm.args, our own proposal). docs/erts/tuning.md §0.2 lists the gotchas checked here:

* R8: lmbcs < 2 x sbct (erlang/otp#9521: steady RSS growth to OOM);
* R9 / §0.2 item 1: bf, aobf, gf switch carrier migration off (acul 0); `t false` too (item 3);
* §0.2 item 2: the order of `+M<S>as` and `+M<S>acul` decides which one survives;
* values erts clamps or rejects (docs/erts/alloc_util.md §2.1, §2.2);
* flags the node's release does not know (docs/erts/alloc_util.md §2.5), or accepts and ignores
  (`+hmaxib` before OTP 26);
* OTP 26-29's knobs set where they do nothing: `+Mumadtn true` with no acful, `+MMlp on` with no
  super carrier, `+hmaxib true` with no `+hmax` (docs/erts/releases.md §4).

Besides `+M` flags it reads the `+hmax*` flags (a process's max_heap_size, erl(1)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from beamalloc.advice.findings import MCS_MAX, NON_MIGRATING, SINCE
from beamalloc.analyzer.options import first_scheduler_options
from beamalloc.flags import (
    ALLOCATOR_LETTERS,
    ALLOCATORS,
    AOFF_FAMILY,
    NO_MIGRATION,
    UINT_MAX,
    Flag,
    FlagError,
    FlagSet,
    effective_config,
    parse,
)
from beamalloc.snapshot import Snapshot
from beamalloc.units import human
from beamalloc.versions import ERTS_TO_OTP, nearest_modelled_otp

Where = Literal["in force", "given", "proposed"]

R8_FACTOR = 2  # docs/erts/tuning.md §1 R8: lmbcs >= 2 x sbct [heur from the maintainer's guidance]
PCT_PARAMS = ("rsbcst", "rsbcmt", "rmbcmt")  # clamped to 100 (docs/erts/alloc_util.md §2.1)
#: `+hmax*` flags (erl(1)): the words of max_heap_size, and its booleans.
HMAX_BOOLS = ("hmaxib", "hmaxel", "hmaxk")


@dataclass(frozen=True)
class LintIssue:
    check: str  # lmbcs-sbct, migration-off, order, range, release, invalid, no-effect
    level: Literal["error", "warning"]
    where: Where
    message: str
    rule: str  # the reference it enforces
    allocator: str | None = None
    flag: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in
                ("check", "level", "where", "allocator", "flag", "message", "rule")}  # fmt: skip




def _known(key: str, erts: tuple[int, ...] | None) -> bool:
    if erts is None or key not in SINCE:
        return True
    if key == "cp" and (10, 7, 2) <= erts < (11,):
        return True
    return erts >= SINCE[key]


def _lmbcs_sbct(
    name: str, opts: dict[str, Any], where: Where, flag: str | None
) -> LintIssue | None:
    sbct, lmbcs, smbcs = opts.get("sbct"), opts.get("lmbcs"), opts.get("smbcs", 0)
    if not (isinstance(sbct, int) and isinstance(lmbcs, int)) or sbct >= UINT_MAX or sbct == 0:
        return None
    lmbcs = max(lmbcs, smbcs if isinstance(smbcs, int) else 0)  # effective lmbcs (§2.1)
    if lmbcs >= R8_FACTOR * sbct:
        return None
    return LintIssue("lmbcs-sbct", "warning", where,
                     f"{name}: lmbcs {human(lmbcs)} < 2 x sbct {human(sbct)}: blocks just below "
                     "sbct need carriers larger than lmbcs, and RSS can grow without bound "
                     "(erlang/otp#9521). Lower sbct with lmbcs, or keep lmbcs >= 2 x sbct.",
                     "docs/erts/tuning.md §1 R8, §0.2 item 5", name, flag)  # fmt: skip


def lint_in_force(snap: Snapshot) -> list[LintIssue]:
    """Check the options each allocator runs with (its first scheduler instance)."""
    out: list[LintIssue] = []
    for name, o in sorted(first_scheduler_options(snap).items()):
        letter = ALLOCATOR_LETTERS.get(name)
        if letter is None:
            continue
        if letter not in NO_MIGRATION and o.get("as") in NON_MIGRATING and o.get("acul") == 0:
            out.append(LintIssue("migration-off", "warning", "in force",
                                 f"{name} runs `as {o['as']}` with acul 0: carrier migration is "
                                 f"off, so a free carrier of one scheduler cannot serve another "
                                 f"(likely from +M{letter}as {o['as']}). Prefer ageffcbf or "
                                 "aoffcbf.",
                                 "docs/erts/tuning.md §1 R9, §0.2 item 1", name))  # fmt: skip
        issue = _lmbcs_sbct(name, o, "in force", None)
        if issue:
            out.append(issue)
    return out


def _groups(tokens: list[str]) -> list[list[str]]:
    """Split tokens into one group per flag, so one bad flag does not hide the others."""
    out: list[list[str]] = []
    for tok in tokens:
        if out and len(out[-1]) == 1 and not tok.startswith("+") and not _complete(out[-1][0]):
            out[-1].append(tok)
        else:
            out.append([tok])
    return out


def _complete(token: str) -> bool:
    """Whether a token is a whole flag by itself (its value glued on, as in +MBasbf)."""
    try:
        parse([token])
    except FlagError:
        return False
    return True


def lint_flags(
    flags: str | FlagSet,
    *,
    where: Where = "given",
    base: dict[str, dict[str, Any]] | None = None,
    schedulers: int | None = None,
    erts: tuple[int, ...] | None = None,
) -> list[LintIssue]:
    """Lint a flag string (or FlagSet). `base` is the options in force per allocator name, onto
    which the flags are laid to check lmbcs against sbct; without it, OTP 25 defaults are used.
    """
    out: list[LintIssue] = []
    if isinstance(flags, FlagSet):
        fs = flags
    else:
        good: list[str] = []
        heap: dict[str, str] = {}
        for group in _groups(flags.split()):
            if group[0].startswith("+hmax"):
                out += _heap_flag(group, heap, where, erts)
                continue
            try:
                parse(group, otp=nearest_modelled_otp(erts))
                good += group
            except FlagError as e:
                out.append(LintIssue(e.kind, "error", where, str(e), "docs/erts/alloc_util.md §2",
                                     flag=group[0]))  # fmt: skip
        fs = parse(good, otp=nearest_modelled_otp(erts))
        if heap.get("hmaxib") == "true" and heap.get("hmax", "0") == "0":
            out.append(LintIssue("no-effect", "warning", where,
                                 "+hmaxib true counts off-heap binaries towards max_heap_size, "
                                 "which is 0 (no limit) without +hmax: only processes that set "
                                 "their own max_heap_size are checked. Set +hmax (words).",
                                 "docs/erts/releases.md §4", flag="+hmaxib"))  # fmt: skip
    out += _release(fs, where, erts) + _ranges(fs, where) + _order(fs, where)
    out += _no_effect(fs, where, base)
    out += _resulting_sizes(fs, where, base, schedulers)
    return out


def _heap_flag(
    group: list[str], heap: dict[str, str], where: Where, erts: tuple[int, ...] | None
) -> list[LintIssue]:
    """One `+hmax*` flag: its value, and `+hmaxib` against the release (erl(1))."""
    token = group[0][1:]
    name = next((n for n in (*HMAX_BOOLS, "hmax") if token.startswith(n)), None)
    if name is None:
        return [LintIssue("invalid", "error", where, f"unknown flag {group[0]!r}",
                          "erl(1) +hmax", flag=group[0])]  # fmt: skip
    glued = token[len(name):]  # erl takes the value glued on too, as in +hmaxibtrue
    if (len(group) > 1) == bool(glued):
        return [LintIssue("invalid", "error", where, f"{group[0]} expects one value",
                          "erl(1) +hmax", flag=f"+{name}")]  # fmt: skip
    value = glued or group[1]
    ok = value in ("true", "false") if name in HMAX_BOOLS else value.isdigit()
    if not ok:
        want = "true or false" if name in HMAX_BOOLS else "a number of words"
        return [LintIssue("invalid", "error", where, f"bad value {value!r} for +{name}: "
                          f"expected {want}", "erl(1) +hmax", flag=f"+{name}")]  # fmt: skip
    heap[name] = value
    # OTP 25 takes +hmaxib and ignores it (docs/erts/releases.md §4, measured)
    if name == "hmaxib" and erts is not None and not _known("hmaxib", erts):
        return [LintIssue("release", "error", where,
                          f"+hmaxib {value}: erts {_version(erts)} accepts it and ignores it "
                          f"(include_shared_binaries needs {_version(SINCE['hmaxib'], True)})",
                          "docs/erts/releases.md §4", flag="+hmaxib")]  # fmt: skip
    return []


def _version(erts: tuple[int, ...], with_otp: bool = False) -> str:
    text = ".".join(map(str, erts))
    if not with_otp:
        return text
    return f"erts {text}, OTP {'.'.join(map(str, (erts[0] + ERTS_TO_OTP, *erts[1:])))}"


def _no_effect(
    fs: FlagSet, where: Where, base: dict[str, dict[str, Any]] | None
) -> list[LintIssue]:
    """+Mumadtn and +MMlp where they change nothing (docs/erts/releases.md §4)."""
    out = []
    fields = fs.fields()
    if fields.get("u", {}).get("madtn") is True:
        acful = [v for d in fields.values() if (v := d.get("acful")) not in (None, 0)]
        acful += [v for o in (base or {}).values() if (v := o.get("acful")) not in (None, 0)]
        if not acful:
            out.append(LintIssue("no-effect", "warning", where,
                                 "+Mumadtn true changes how acful gives free pages of pooled "
                                 "carriers back (MADV_DONTNEED for MADV_FREE), and no allocator "
                                 "sets acful: nothing is given back. Add +M<S>acful de where "
                                 "pooled carriers hold free pages (pool bloat).",
                                 "docs/erts/releases.md §4", flag="+Mumadtn"))  # fmt: skip
    if fields.get("M", {}).get("lp") == "on" and not fields.get("M", {}).get("scs"):
        out.append(LintIssue("no-effect", "warning", where,
                             "+MMlp on maps large pages only for segments in the super carrier, "
                             "and +MMscs is 0 (no super carrier): it does nothing.",
                             "docs/erts/releases.md §4", flag="+MMlp"))  # fmt: skip
    return out


def _release(fs: FlagSet, where: Where, erts: tuple[int, ...] | None) -> list[LintIssue]:
    out = []
    for f in fs:
        for key in (f.param, str(f.value) if f.param == "as" else ""):
            if key and not _known(key, erts):
                out.append(LintIssue("release", "error", where,
                                     f"{f.render()}: erts {_version(erts or ())} does not know "
                                     f"{key!r} (needs {_version(SINCE[key], True)})",
                                     "docs/erts/alloc_util.md §2.5", flag=f.name))  # fmt: skip
    return out


def _ranges(fs: FlagSet, where: Where) -> list[LintIssue]:
    out = []

    def clamp(f: Flag, what: str) -> None:
        out.append(
            LintIssue(
                "range",
                "warning",
                where,
                f"{f.render()}: {what}",
                "docs/erts/alloc_util.md §2.1, §2.2",
                flag=f.name,
            )
        )

    for f in fs:
        if f.target == "M" and f.param == "mcs" and isinstance(f.value, int) and f.value > MCS_MAX:
            clamp(f, f"erts clamps the mseg cache to {MCS_MAX} segments")
        elif f.param in PCT_PARAMS and isinstance(f.value, int) and f.value > 100:
            clamp(f, "a percentage; erts clamps it to 100")
        elif f.param == "mbcgs" and f.value == 0:
            clamp(f, "erts raises it to 1")
        elif f.param == "sbct" and isinstance(f.value, int) and f.value < 4096:
            clamp(f, "below 4 KiB nearly every block gets a carrier (an mmap) of its own")
    for letter, d in fs.fields().items():
        acul, acful = d.get("acul"), d.get("acful")
        if isinstance(acul, int) and isinstance(acful, int) and acful > acul:
            out.append(
                LintIssue(
                    "range",
                    "warning",
                    where,
                    f"+M{letter}acful {acful} > acul {acul}: erts lowers it to {acul}",
                    "docs/erts/alloc_util.md §2.1",
                    flag=f"+M{letter}acful",
                )
            )
    return out


def _order(fs: FlagSet, where: Where) -> list[LintIssue]:
    """docs/erts/tuning.md §0.2 items 1-3: what each as/t/acul does to the others, per allocator,
    in order."""
    out = []
    for letter in ALLOCATORS:
        if letter in NO_MIGRATION:
            continue
        name = ALLOCATORS[letter][0]
        acul_set: Flag | None = None  # the last acul > 0 not yet cancelled
        off: Flag | None = None  # the last flag that zeroed acul
        for f in fs.for_allocator(letter):
            zeroes = (f.param == "as" and f.value not in AOFF_FAMILY) or (
                f.param == "t" and f.value is False)  # fmt: skip
            if zeroes:
                if acul_set is not None:
                    out.append(
                        LintIssue(
                            "order",
                            "warning",
                            where,
                            f"{acul_set.render()} is lost: the later {f.render()} "
                            "sets acul to 0. Put acul after as.",
                            "docs/erts/tuning.md §0.2 item 2",
                            name,
                            acul_set.name,
                        )
                    )
                off, acul_set = f, None
            elif f.param == "as":
                off = None  # an aoff-family strategy supersedes the one that zeroed acul
            elif f.param == "acul" and f.value != 0:
                if off is not None:
                    what = (f"strategy {off.value} is replaced by aoffcbf" if off.param == "as"
                            else "t false is overridden")  # fmt: skip
                    out.append(
                        LintIssue(
                            "order",
                            "warning",
                            where,
                            f"{off.render()} then {f.render()}: {what}, because a "
                            "non-zero acul re-enables migration.",
                            "docs/erts/tuning.md §0.2 item 2",
                            name,
                            off.name,
                        )
                    )
                off, acul_set = None, f
        if off is not None:
            out.append(
                LintIssue(
                    "migration-off",
                    "warning",
                    where,
                    f"{off.render()} switches carrier migration off for {name} "
                    "(acul 0). Prefer ageffcbf or aoffcbf.",
                    "docs/erts/tuning.md §1 R9, §0.2 items 1 and 3",
                    name,
                    off.name,
                )
            )
    return out


def _resulting_sizes(
    fs: FlagSet, where: Where, base: dict[str, dict[str, Any]] | None, schedulers: int | None
) -> list[LintIssue]:
    fields = fs.fields()
    touched = {ALLOCATORS[t][0]: d for t, d in fields.items() if t in ALLOCATORS}
    if not touched:
        return []
    defaults = effective_config(None, schedulers or 4)  # unknown: assume a multi-core node
    out = []
    for name, d in touched.items():
        opts = dict((base or {}).get(name) or dict(defaults[name].options()))
        opts.update({k: v for k, v in d.items() if k in ("sbct", "lmbcs", "smbcs")})
        flag = next((f"+M{ALLOCATOR_LETTERS[name]}{p}" for p in ("lmbcs", "sbct") if p in d), None)
        issue = _lmbcs_sbct(name, opts, where, flag)
        if issue:
            out.append(issue)
    return out
