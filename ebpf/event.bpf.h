// event.bpf.h: the one definition of a block trace's raw event (included by blocks.bpf.c).
// ebpf/event.py reads this file to unpack the events in Python, so the layout is written once:
// fields are u64 or u32 only, in an order that needs no padding (event.py checks both); and the
// numbers both sides use (OP_*, ST_*).
#ifndef BEAMALLOC_EVENT_BPF_H
#define BEAMALLOC_EVENT_BPF_H

#define OP_ALLOC 0
#define OP_FREE 1
#define OP_REALLOC 2
#define OP_RET 0x10  // summary: the return half of an alloc/realloc

// Per-CPU counters of the block programs (stats[ST_*]), read by the loader under the names
// ST_<NAME> lowercased (blocks.py STAT_NAMES): lost events are reported, never hidden.
#define ST_RINGBUF_FULL 0          // events dropped because the ring buffer was full
#define ST_ENTRY_OVERWRITTEN 1     // an alloc/realloc entry whose return never came
#define ST_RETURN_WITHOUT_ENTRY 2  // a return without its entry (attached mid-call)
#define ST_CALLS 3                 // entry probe hits
#define ST_NO_SLOT 4               // a thread found no batch / pending slot (map full)
#define ST_COUNT 5

// 56 bytes: only what the trace file is made of (tracefile.py), as every byte is copied for
// every call; block sizes are the replay's to compute (docs/trace-format.md).
struct event {
    u64 t_ns;
    u64 ptr;      // alloc: result; free: p; realloc: old p
    u64 new_ptr;  // realloc: result
    u64 allctr;   // Allctr_t * owning the (new) block, from its carrier header
    u64 size;     // requested size (alloc, realloc)
    u32 type;     // ErtsAlcType_t
    u32 tid;
    u32 op;
    u32 pad;
};

#endif
