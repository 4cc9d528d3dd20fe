// bits.bpf.h: helpers the BPF programs here share (included by blocks.bpf.c and carriers.bpf.c).
#ifndef BEAMALLOC_BITS_BPF_H
#define BEAMALLOC_BITS_BPF_H

// floor(log2(v)), 0 for v = 0: a size's slot in the log2 histograms. Unrolled halving, as the
// verifier wants bounded loops.
static __always_inline u32 log2_slot(u64 v) {
    u32 s = 0;
#pragma unroll
    for (int i = 32; i > 0; i >>= 1) {
        if (v >= (1ULL << i)) {
            v >>= i;
            s += i;
        }
    }
    return s;
}

#endif
