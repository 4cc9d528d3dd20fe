"""Seed inputs for the reader fuzzers (atheris_readers.py): small valid inputs of each kind,
cut from the samples so that libFuzzer's length limit keeps them whole.

    python tests/fuzz/reader_seeds.py OUT_DIR     # writes OUT_DIR/{terms,etf,recon,crashdump}/
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DATA = ROOT / "tests" / "data"
SAMPLES = ROOT / "samples" / "otp25"
if not SAMPLES.exists():
    SAMPLES = ROOT.parent / "shared" / "samples" / "otp25"


def _small_recon() -> list[bytes]:
    """recon files of 1-4 allocator entries, each written as ~p would."""
    sys.path.insert(0, str(ROOT.parent))
    from beamalloc.collector.terms import format_term, parse_term

    out = []
    for src in (SAMPLES / "recon_snapshot.txt", SAMPLES / "raw_allocator_dump.txt"):
        if not src.exists():
            continue
        memory, allocs = parse_term(src.read_text("latin-1"), final_dot=False)
        for k in (1, 2, 4):
            out.append((format_term((memory, allocs[:k])) + ".\n").encode("latin-1"))
    return out


def _small_dumps() -> list[bytes]:
    """Crash dumps cut to their header, =memory and a few =allocator sections."""
    out = [(DATA / "otp22_crash.dump").read_bytes()]
    src = SAMPLES / "erl_crash.dump"
    if src.exists():
        lines = src.read_bytes().split(b"\n")
        head = lines[:8]
        sections: list[list[bytes]] = []
        for line in lines[8:]:
            if line.startswith(b"="):
                sections.append([line])
            elif sections:
                sections[-1].append(line)
        keep = [s for s in sections if s[0].startswith((b"=memory", b"=allocator:"))]
        for i in range(0, min(len(keep), 12), 3):
            out.append(b"\n".join(head + [x for s in keep[i:i + 3] for x in s] + [b"=end"]))
    return out


_ETF_TERMS = [
    "{[{total,1}],[]}",
    "[{instance,0,[{versions,\"0.9\",\"3.0\"},{options,[{e,true},{sbct,524288}]},"
    "{mbcs,[{blocks,[{binary_alloc,[{count,1,2,3},{size,4,5,6}]}]},{carriers,1,1,1},"
    "{carriers_size,32768,32768,32768}]},{sbcs,[{blocks,[]},{carriers,0,0,0},"
    "{carriers_size,0,0,0}]},{calls,[{binary_alloc,0,5}]}]}]",
    "{a,<<1,2,3>>,[1.5,-7,18446744073709551615,\"str\",'Q a']}",
]


def _etf() -> list[bytes]:
    """term_to_binary of a few terms and of the recon seeds, plain and compressed (needs erl)."""
    erl = shutil.which("erl")
    if erl is None:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        terms = Path(tmp) / "terms.txt"
        recon = [t.decode("latin-1") for t in _small_recon()[:2]]
        terms.write_text("".join(t + ".\n" for t in _ETF_TERMS) + "".join(recon), "latin-1")
        prog = (
            f'{{ok, Ts}} = file:consult("{terms}"), '
            "lists:foldl(fun(T, I) -> "
            f'ok = file:write_file("{tmp}/" ++ integer_to_list(I), term_to_binary(T)), '
            f'ok = file:write_file("{tmp}/z" ++ integer_to_list(I), '
            "term_to_binary(T, [compressed])), I + 1 end, 0, Ts), halt()."
        )
        subprocess.run([erl, "-noshell", "-eval", prog], check=True, timeout=60,
                       capture_output=True)
        return [p.read_bytes() for p in sorted(Path(tmp).iterdir()) if p.name != "terms.txt"]


def write(out: Path) -> dict[str, int]:
    recon = _small_recon() + [(DATA / n).read_bytes() for n in
                              ("hand_recon.txt", "otp22_raw.txt", "pooltest_raw.txt")]
    kinds = {
        "terms": [*recon, b"[a,'b c',\"s\",<<1,2>>,$x,16#ff,-1.5e3,#Ref<0.1.2.3>,<0.1.2>]."],
        "recon": recon,
        "crashdump": _small_dumps(),
        "etf": _etf(),
    }
    counts = {}
    for kind, seeds in kinds.items():
        d = out / kind
        d.mkdir(parents=True, exist_ok=True)
        for i, s in enumerate(seeds):
            (d / f"seed{i:02d}").write_bytes(s)
        counts[kind] = len(seeds)
    return counts


if __name__ == "__main__":
    print(write(Path(sys.argv[1])))
