"""Write the bad-input corpus (tests/corpus/README.md): every kind of input beamalloc reads,
broken in every way a disk, a network, an editor or a careless user breaks it.

    .venv/bin/python tests/corpus/make_corpus.py            # rewrites tests/corpus/bad/
    .venv/bin/python tests/corpus/make_corpus.py --check    # exit 1 if bad/ is not what it writes

Seeded and deterministic: the same files every time, so a change in them is a change in this
script. Each name says where it comes from and what was done to it:
`<seed>__<mutation>[_<n>].<ext>`. Files whose mutation guarantees the input is wrong (a negative
size, wordsize 3, ...) start with `x_`: they must give exit 2, not 0. The special files (FIFO,
device, socket, directory, symlink loop) cannot live in git; `special_files()` makes them in a
directory at test time.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import socket
import struct
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OUT = HERE / "bad"
DATA = ROOT / "tests" / "data"
SAMPLES = ROOT / "samples" / "otp25"

#: A stand-in for an Erlang cookie passed by mistake as a source: no byte of it may reach an
#: error line (issue 16 item 6). Latin letters, one with characters above U+00FF.
SECRETS = ("QWERTYSECRETCOOKIEZZKQ", "kakushi-ΣΕΚΡΕΤ-秘密-cookie")


# ---- seeds: one small valid input of every kind ----------------------------------------------


def _recon_cut(src: Path, k: int) -> bytes:
    from beamalloc.collector.terms import format_term, parse_term

    memory, allocs = parse_term(src.read_text("latin-1"), final_dot=False)
    util = [a for a in allocs if "mbcs" in str(a)][:k]
    other = [a for a in allocs if "mbcs" not in str(a)][:2]
    return (format_term((memory, other + util)) + ".\n").encode("latin-1")


def _dump_cut(src: Path, keep: int) -> bytes:
    """A crash dump with its header, =memory and `keep` =allocator sections, then =end."""
    lines = src.read_bytes().split(b"\n")
    out, sections, kept = lines[:8], [], 0
    for line in lines[8:]:
        if line.startswith(b"="):
            sections.append([line])
        elif sections:
            sections[-1].append(line)
    for s in sections:
        if s[0].startswith(b"=memory") or (s[0].startswith(b"=allocator:") and kept < keep):
            kept += s[0].startswith(b"=allocator:")
            out += s
    return b"\n".join([*out, b"=end", b""])


def _json(recon: bytes) -> bytes:
    from beamalloc.collector.recon import read_recon

    snap = read_recon(recon.decode("latin-1"), node="app@host", taken_at=1_700_000_000.0)
    snap.wordsize, snap.schedulers, snap.otp_release = 8, 4, "25"
    return snap.to_json(indent=1).encode()


def _trace(binary: bool) -> bytes:
    sys.path.insert(0, str(ROOT / "refalloc" / "fuzz"))
    import seeds  # refalloc/fuzz/seeds.py: small valid traces

    data = seeds.trace(16, 60)
    if binary:
        return data
    import tempfile

    from beamalloc.trace import open_trace_stream, write_csv

    with open_trace_stream(io.BufferedReader(io.BytesIO(data)), "seed") as r:
        header, events = r.header, list(r)
    with tempfile.TemporaryDirectory() as tmp:
        write_csv(Path(tmp) / "t.csv", header, events)
        return (Path(tmp) / "t.csv").read_bytes()


#: What `beamalloc snippet`'s expression wrote on an OTP 25 node (erl -noshell, 2 schedulers):
#: compressed external term format (collector/snippet.py).
SNIPPET = (HERE / "snippet_seed.etf").read_bytes()


def _inflated(etf: bytes) -> bytes:
    """The same term uncompressed: 131, then the zlib stream's contents."""
    import zlib

    return etf[:1] + zlib.decompress(etf[6:])


def seeds() -> dict[str, tuple[str, bytes]]:
    """name -> (extension, bytes)."""
    recon = _recon_cut(SAMPLES / "recon_snapshot.txt", 4)
    return {
        "recon": ("txt", recon),
        "hand_recon": ("txt", (DATA / "hand_recon.txt").read_bytes()),
        "otp22_raw": ("txt", (DATA / "otp22_raw.txt").read_bytes()),
        "raw_dump": ("txt", _recon_cut(SAMPLES / "raw_allocator_dump.txt", 3)),
        "system_info": ("txt", (SAMPLES / "system_info_binary_alloc.txt").read_bytes()),
        "json": ("json", _json(recon)),
        "otp22_dump": ("dump", (DATA / "otp22_crash.dump").read_bytes()),
        "otp25_dump": ("dump", _dump_cut(SAMPLES / "erl_crash.dump", 6)),
        "snippet": ("etf", SNIPPET),
        "snippet_raw": ("etf", _inflated(SNIPPET)),
        "trace_bin": ("batr", _trace(True)),
        "trace_csv": ("csv", _trace(False)),
    }


# ---- mutations ---------------------------------------------------------------------------------

Mutation = Callable[[bytes, random.Random], bytes]


def truncate(frac: float) -> Mutation:
    return lambda b, r: b[: int(len(b) * frac)]


def bit_flips(n: int) -> Mutation:
    def f(b: bytes, r: random.Random) -> bytes:
        a = bytearray(b)
        for _ in range(n):
            i = r.randrange(len(a))
            a[i] ^= 1 << r.randrange(8)
        return bytes(a)

    return f


def delete_chunk(b: bytes, r: random.Random) -> bytes:
    i = r.randrange(len(b))
    return b[:i] + b[i + r.randrange(1, max(2, len(b) // 8)) :]


def insert_chunk(b: bytes, r: random.Random) -> bytes:
    i, j = r.randrange(len(b)), r.randrange(len(b))
    return b[:i] + b[j : j + r.randrange(1, 200)] + b[i:]


def delete_lines(b: bytes, r: random.Random) -> bytes:
    lines = b.split(b"\n")
    i = r.randrange(len(lines))
    return b"\n".join(lines[:i] + lines[i + r.randrange(1, 6) :])


def _numbers(b: bytes) -> list[re.Match[bytes]]:
    return list(re.finditer(rb"(?<![\w.#])\d{2,}(?![\w.#])", b))


def replace_number(new: bytes) -> Mutation:
    def f(b: bytes, r: random.Random) -> bytes:
        ms = _numbers(b)
        if not ms:
            return b + new
        m = r.choice(ms)
        return b[: m.start()] + new + b[m.end() :]

    return f


def replace_all_numbers(new: bytes) -> Mutation:
    return lambda b, r: re.sub(rb"(?<![\w.#])\d{2,}(?![\w.#])", new, b)


def text_insert(new: bytes) -> Mutation:
    def f(b: bytes, r: random.Random) -> bytes:
        i = r.randrange(len(b))
        return b[:i] + new + b[i:]

    return f


MUTATIONS: dict[str, tuple[Mutation, int]] = {  # name -> (mutation, files per seed)
    "trunc_half": (truncate(0.5), 1),
    "trunc_90": (truncate(0.9), 1),
    "trunc_3": (truncate(0.03), 1),
    "trunc_rand": (lambda b, r: b[: r.randrange(1, len(b))], 2),
    "bitflip1": (bit_flips(1), 3),
    "bitflip16": (bit_flips(16), 2),
    "del_chunk": (delete_chunk, 3),
    "ins_chunk": (insert_chunk, 3),
    "del_lines": (delete_lines, 2),
    "num_neg": (replace_number(b"-5"), 1),
    "num_1e30": (replace_number(b"1" + b"0" * 30), 1),
    "num_1e300": (replace_number(b"1.0e300"), 1),
    "num_1e999": (replace_number(b"1.0e999"), 1),
    "num_5000_digits": (replace_number(b"9" * 5000), 1),
    "num_text": (replace_number(b"abc"), 1),
    "all_nums_neg": (replace_all_numbers(b"-1"), 1),
    "all_nums_huge": (replace_all_numbers(b"1" + b"0" * 30), 1),
    "nul": (text_insert(b"\x00"), 1),
    "bad_utf8": (text_insert(b"\xff\xfe\xc3"), 1),
    "leading_newlines": (lambda b, r: b"\n" * 70 + b, 1),
    "crlf": (lambda b, r: b.replace(b"\n", b"\r\n"), 1),
    "doubled": (lambda b, r: b + b, 1),
}

#: Field-level JSON edits that make a snapshot impossible (exit 2 expected).
JSON_EDITS: dict[str, tuple[str, object]] = {
    "taken_at_inf": ("taken_at", "__Infinity__"),
    "taken_at_nan": ("taken_at", "__NaN__"),
    "taken_at_1e300": ("taken_at", 1e300),
    "taken_at_10pow400": ("taken_at", 10**400),
    "taken_at_neg": ("taken_at", -1.5),
    "wordsize_3": ("wordsize", 3),
    "schedulers_neg5": ("schedulers", -5),
    "schedulers_1e9": ("schedulers", 1_000_000_000),
    "node_surrogate": ("node", "__\\ud800__"),
    "node_newline": ("node", "a\nb"),
    "node_empty": ("node", ""),
    "os_pid_neg": ("os_pid", -1),
    "memory_neg": ("memory.total", -100),
    "sbct_abc": ("allocators.0.options.sbct", "abc"),
    "sbct_neg": ("allocators.0.options.sbct", -1),
    "carriers_1e30": ("allocators.0.mbcs.carriers_size", [10**30, 10**30, 10**30]),
    "blocks_neg": ("allocators.0.mbcs.carriers", [-1, 0, 0]),
    "instance_neg": ("allocators.0.instance", -3),
    "instance_huge": ("allocators.0.instance", 10**12),
    "release_surrogate": ("otp_release", "__\\udfff__"),
    "rss_neg": ("rss", -4096),
    "secret_as_node": ("node", "__\\ud83d__" + SECRETS[0]),
    # issue 25: ranges on load, control characters in what is printed, too many notes
    "carriers_skipped_neg": ("carriers_skipped", -1),
    "node_escape": ("node", "\x1b]0;PWNED\x07a@b"),
    "release_escape": ("otp_release", "25\x1b[2J"),
    "notes_2000": ("notes", ["a note"] * 2000),
}


def _json_edit(doc: bytes, path: str, value: object) -> bytes:
    d = json.loads(doc)
    *parents, last = path.split(".")
    x = d
    for p in parents:
        x = x[int(p)] if isinstance(x, list) else x[p]
    x[int(last) if isinstance(x, list) else last] = value
    text = json.dumps(d, indent=1)
    # Tokens JSON cannot write from Python values: spliced in as text.
    return (text.replace('"__Infinity__"', "Infinity").replace('"__NaN__"', "NaN")
            .replace("__\\\\ud", "\\ud").replace("__", "").encode())


_RECON_EDITS = {  # recon text edits that make the data impossible (exit 2 expected)
    "x_recon_negative_blocks": (rb"\{blocks_size,\d+,", b"{blocks_size,-7,"),
    "x_recon_sbct_text": (rb"\{sbct,\d+\}", b"{sbct,\"abc\"}"),
    "x_recon_triple_1e30": (rb"\{carriers_size,\d+,", b"{carriers_size," + b"1" + b"0" * 30 + b","),
    "x_recon_instance_atom": (rb"\{\{(\w+),0\},", rb"{{\1,zero},"),
}

_DUMP_EDITS = {  # crash dump line edits (exit 2 expected)
    "x_dump_negative_size": (rb"mbcs carriers size: \d+", b"mbcs carriers size: -5 3 3"),
    "x_dump_text_size": (rb"(mbcs blocks(?:\[\w+\])? size): \d+", rb"\1: abc"),
    "x_dump_empty_numbers": (rb"sbcs carriers: [\d ]+", b"sbcs carriers: "),
    "x_dump_schedulers_huge": (rb"\[smp:\d+:\d+\]", b"[smp:5000000:5000000]"),
}


def _secret_files() -> Iterator[tuple[str, bytes]]:
    """Cookie-like files, given where a snapshot file goes."""
    for i, s in enumerate(SECRETS):
        raw = s.encode()
        yield f"x_secret{i}_cookie.txt", raw
        yield f"x_secret{i}_cookie_newline.txt", raw + b"\n"
        yield f"x_secret{i}_latin1.txt", s.encode("latin-1", "replace")
        yield f"x_secret{i}_quoted.txt", b"'" + raw + b"'."
        yield f"x_secret{i}_in_term.txt", b"{[{total,1}],[{{" + raw + b",0},[]}]}."
        yield f"x_secret{i}_json.json", b'{"schema": "' + raw + b'"}'
        yield (f"x_secret{i}_json_field.json",
               b'{"schema": "beamalloc.snapshot/1", "' + raw + b'": 1}')
        yield f"x_secret{i}_dump.dump", b"=erl_crash_dump:0.5\n" + raw + b"\n"


def generate() -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for seed_name, (ext, data) in seeds().items():
        r = random.Random(f"{seed_name}-16")
        for mname, (mut, n) in MUTATIONS.items():
            for k in range(n):
                name = f"{seed_name}__{mname}" + (f"_{k}" if n > 1 else "") + f".{ext}"
                files[name] = mut(data, r)
    _, doc = seeds()["json"]
    for ename, (path, value) in JSON_EDITS.items():
        files[f"x_json__{ename}.json"] = _json_edit(doc, path, value)
    for name, (pat, new) in _RECON_EDITS.items():
        files[f"{name}.txt"] = re.sub(pat, new, seeds()["recon"][1], count=1)
    for src in ("otp22_dump", "otp25_dump"):
        for name, (pat, new) in _DUMP_EDITS.items():
            files[f"{name}__{src}.dump"] = re.sub(pat, new, seeds()[src][1], count=1)
    files.update(_secret_files())
    files["x_empty.txt"] = b""
    files["x_only_newlines.txt"] = b"\n" * 5000
    files["x_nul.bin"] = b"\x00" * 1000
    files["x_utf16.txt"] = seeds()["hand_recon"][1].decode("latin-1").encode("utf-16")
    files["x_deep_list.txt"] = b"[" * 20_000
    files["x_deep_json.json"] = b'{"schema": ' + b"[" * 20_000
    files["x_dump_header_only.dump"] = b"=erl_crash_dump:0.5\nMon Jan  1 00:00:00 2024\n"
    files["x_dump_magic_only.dump"] = b"=erl_crash_dump:"
    files["x_dump_huge_line.dump"] = (b"=erl_crash_dump:0.5\n=allocator:binary_alloc[1]\n"
                                      + b"mbcs carriers: " + b"1" * 5_000 + b"\n=end\n")
    files["x_trace_magic_only.batr"] = seeds()["trace_bin"][1][:8]
    files.update(hostile_files())
    return files


def _etf_compressed(body: bytes) -> bytes:
    return b"\x83\x50" + struct.pack(">I", len(body)) + zlib.compress(body, 9)


def _etf_list(n: int, element: bytes) -> bytes:
    return b"\x6c" + struct.pack(">I", n) + element * n + b"\x6a"


def _trace_head(header: bytes, claimed: int | None = None) -> bytes:
    """A binary trace's magic, version 1, no flags, and `header` as its JSON header."""
    magic = seeds()["trace_bin"][1][:10]  # magic and version
    return magic + struct.pack("<HI", 0, len(header) if claimed is None else claimed) + header


def _etf_atom(name: bytes) -> bytes:
    return b"\x77" + bytes([len(name)]) + name


def hostile_files() -> dict[str, bytes]:
    """Issue 25's inputs: decompression bombs (ETF whose compressed body builds far more than
    it reads), file bytes a message must not quote, slow shapes (leading white space, many
    deep nesting)."""
    # A list of (128 Mi - 6) NILs, 130 KB compressed: it made `analyze` build 9.6 GB.
    nils = (128 << 20) - 6
    files = {
        "x_etf_bomb_128mib_nils.etf": _etf_compressed(_etf_list(nils, b"\x6a")),
        # within the inflated size limit, over the build budget at its first byte
        "x_etf_bomb_32mib_nils.etf": _etf_compressed(_etf_list((32 << 20) - 6, b"\x6a")),
        # 4 Mi one-element lists: over the build budget part way through
        "x_etf_bomb_nested.etf": _etf_compressed(_etf_list(4 << 20, b"\x6c\0\0\0\x01\x6a\x6a")),
        # a snippet whose version is a binary: the message must not quote it
        "x_etf_snippet_version_binary.etf": (
            b"\x83\x68\x03\x77\x11beamalloc_snippet\x6d\0\0\0\x09secretXYZ\x6a"),
        # a snippet whose node name holds a terminal escape sequence
        "x_etf_snippet_escape_node.etf": (
            b"\x83\x68\x03\x77\x11beamalloc_snippet\x61\x01\x6c\0\0\0\x02"
            + b"\x68\x02\x77\x04node" + _etf_atom(b"\x1b]0;PWNED\x07\x1b[2Ja@b")
            + b"\x68\x02\x77\x0aallocators\x6a\x6a"),
        # trace headers nested past Python's recursion limit (a RecursionError), and one that
        # claims 4 GiB
        "x_trace_deep_header.batr": _trace_head(b"[" * 20_000),
        "x_trace_huge_header.batr": _trace_head(b"", 0xFFFFFFF0),
        "x_trace_deep_header.csv": b"# beamalloc-trace 1 " + b"[" * 20_000 + b"\n",
        "x_json_unknown_source.json": (b'{"schema": "beamalloc.snapshot/1", "node": "a@b", '
                                       b'"source": "secretXYZ\\u001b[2J"}'),
        "x_json_deep_900.json": (b'{"schema": "beamalloc.snapshot/1", "node": "a@b", '
                                 b'"source": "json", "extra": {"x": '
                                 + b"[" * 900 + b"]" * 900 + b"}}"),
    }
    return files


def special_files(where: Path) -> dict[str, Path]:
    """Files git cannot hold, made in `where`: each must be refused (exit 2) before it is
    opened, and nothing may wait on it."""
    where.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    fifo = where / "fifo"
    os.mkfifo(fifo)
    out["fifo"] = fifo
    loop = where / "loop"
    os.symlink(loop, loop)
    out["symlink_loop"] = loop
    pair_a, pair_b = where / "loop_a", where / "loop_b"
    os.symlink(pair_b, pair_a)
    os.symlink(pair_a, pair_b)
    out["symlink_loop_pair"] = pair_a
    out["directory"] = where
    out["dev_zero"] = Path("/dev/zero")
    out["dev_urandom"] = Path("/dev/urandom")
    link = where / "to_dev_zero"
    os.symlink("/dev/zero", link)
    out["symlink_to_dev_zero"] = link
    link = where / "to_fifo"
    os.symlink(fifo, link)
    out["symlink_to_fifo"] = link
    sock = where / "sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock))
    s.close()
    out["socket"] = sock
    out["dangling"] = where / "missing" / "file.txt"
    out["nul_in_name"] = Path("bad\x00name.txt")
    if os.geteuid() == 0:
        dev = where / "chardev"
        os.mknod(dev, 0o600 | 0o020000, os.makedev(1, 3))  # a private /dev/null
        out["char_device"] = dev
    return out


def main(argv: list[str]) -> int:
    files = generate()
    if "--check" in argv:
        have = {p.name: p.read_bytes() for p in OUT.iterdir() if p.is_file()}
        if have != files:
            print(f"{OUT} differs from what {Path(__file__).name} writes", file=sys.stderr)
            return 1
        return 0
    OUT.mkdir(exist_ok=True)
    for p in OUT.iterdir():
        p.unlink()
    for name, data in files.items():
        (OUT / name).write_bytes(data)
    print(f"{len(files)} files in {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
