"""The replay stage: the Rust model of alloc_util (src/, built into beamalloc._refalloc), its
Python adapter (replay.py: one entry point, a trace and flags in, a Snapshot out) and the
synthetic trace generators (tracegen.py), as collector/ holds its Erlang."""
