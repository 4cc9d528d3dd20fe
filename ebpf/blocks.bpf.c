// Block level: uprobes on alloc_util's exported entry points in beam.smp (docs/erts/alloc_util.md §7).
//
// erts_alcu_alloc*(type, extra, size) / erts_alcu_free*(type, extra, p) /
// erts_alcu_realloc*(type, extra, p, size), one family per way an allocator is reached.
// The owner of a block (its allocator instance) is read from the block and carrier headers:
// at free entry, before the block is rewritten, and at alloc/realloc return (§7, "Resolving").
//
// Built with -DTRACE_EVENTS: every call becomes an event (event.bpf.h), batched per thread (a
// thread never races with itself, so a batch needs no lock) and pushed to a ring buffer BATCH at
// a time, which keeps the reader's work per event tiny. Without it: counts, log2 histograms and
// bytes are summed in the kernel per (owner, type, op, log2 size).

#include <uapi/linux/ptrace.h>

#include "bits.bpf.h"
#include "event.bpf.h"  // struct event, OP_* and ST_*

#define OP_PENDING 0x80

// Per-CPU counters (ST_* in event.bpf.h), read by the loader.
BPF_PERCPU_ARRAY(stats, u64, ST_COUNT);

// Set by the loader once every probe is attached, cleared before it starts detaching: probes
// attach and (slowly) detach one by one, and counting only while all are in place makes a
// sampled slice's length exact.
BPF_ARRAY(enabled, u32, 1);

static __always_inline int is_enabled(void) {
    int k = 0;
    u32 *v = enabled.lookup(&k);
    return v && *v;
}

static __always_inline void stat_add(int i, u64 n) {
    u64 *v = stats.lookup(&i);
    if (v)
        *v += n;
}

// Block size and owning Allctr_t of the block whose user pointer is p (docs/erts/alloc_util.md §7):
// an SBC block has all three low flag bits set and sits right after the 32-byte SBC header;
// an MBC block stores its carrier's distance in 16 KB units in the header's high bits.
static __always_inline void owner_of(u64 p, u64 *blk, u64 *allctr) {
    u64 bhdr = 0, carrier, crr_allctr = 0;
    *blk = 0;
    *allctr = 0;
    if (!p || bpf_probe_read_user(&bhdr, sizeof(bhdr), (void *)(p - 8)))
        return;
    if ((bhdr & 7) == 7) {
        carrier = p - 8 - 32;
        *blk = bhdr & 0x7FFFFFFFFFFFFFF8ULL;  // bit 63 is a flag, not size
    } else {
        carrier = ((p - 8) & ~0x3FFFULL) - (((bhdr & 0x7FFFFFFFFFFFFFFFULL) >> 40) << 14);
        *blk = bhdr & 0xFFFFFFFFF8ULL;
    }
    if (bpf_probe_read_user(&crr_allctr, sizeof(crr_allctr), (void *)(carrier + 24)))
        return;
    *allctr = crr_allctr & ~7ULL;  // low bits: IN_POOL / BUSY / HOMECOMING (§5)
}

#ifdef TRACE_EVENTS

struct batch {
    u32 n;
    u32 pad;
    struct event ev[BATCH];
};

// Not preallocated: a batch is BATCH events, and only the threads that allocate get one.
BPF_F_TABLE("hash", u32, struct batch, batches, MAX_THREADS, BPF_F_NO_PREALLOC);
BPF_PERCPU_ARRAY(zero_batch, struct batch, 1);
BPF_RINGBUF_OUTPUT(events, RINGBUF_PAGES);

static __always_inline struct batch *my_batch(u32 tid) {
    struct batch *b = batches.lookup(&tid);
    if (b)
        return b;
    int k = 0;
    struct batch *z = zero_batch.lookup(&k);
    if (!z)
        return 0;
    batches.update(&tid, z);
    return batches.lookup(&tid);
}

static __always_inline void push(struct batch *b) {
    u32 n = b->n + 1;
    if (n < BATCH) {
        b->n = n;
        return;
    }
    // No wakeup: the loader drains the ring buffer on its own clock (blocks.py, poll), so a
    // full batch costs a copy, never an interrupt and a reader woken per record.
    if (events.ringbuf_output(&b->ev, sizeof(b->ev), BPF_RB_NO_WAKEUP))
        stat_add(ST_RINGBUF_FULL, BATCH);
    b->n = 0;
}

static __always_inline int on_entry(u32 op, u64 type, u64 ptr, u64 size) {
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct batch *b = my_batch(tid);
    stat_add(ST_CALLS, 1);
    if (!b) {
        stat_add(ST_NO_SLOT, 1);
        return 0;
    }
    struct event *e = &b->ev[b->n & (BATCH - 1)];
    if (e->op & OP_PENDING)
        stat_add(ST_ENTRY_OVERWRITTEN, 1);
    e->t_ns = bpf_ktime_get_ns();
    e->type = type;
    e->tid = tid;
    e->ptr = ptr;
    e->new_ptr = 0;
    e->size = size;
    if (op == OP_FREE) {
        u64 blk;
        owner_of(ptr, &blk, &e->allctr);
        e->op = OP_FREE;
        push(b);
        return 0;
    }
    e->op = op | OP_PENDING;
    return 0;
}

static __always_inline int on_return(u64 ret) {
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct batch *b = batches.lookup(&tid);
    if (!b)
        return 0;
    struct event *e = &b->ev[b->n & (BATCH - 1)];
    if (!(e->op & OP_PENDING)) {
        stat_add(ST_RETURN_WITHOUT_ENTRY, 1);
        return 0;
    }
    e->op &= ~OP_PENDING;
    if (e->op == OP_REALLOC)
        e->new_ptr = ret;
    else
        e->ptr = ret;
    u64 blk;
    owner_of(ret, &blk, &e->allctr);
    push(b);
    return 0;
}

#else  // summary: aggregate in the kernel

struct hkey {
    u64 allctr;
    u32 type;
    u8 op;
    u8 slot;  // log2 of the requested size (entries) or of the block size (returns, frees)
    u16 pad;
};
struct hval {
    u64 count;
    u64 bytes;  // requested bytes (alloc, realloc)
    u64 blk;    // block bytes added (alloc, realloc: new block) or removed (free)
    u64 old_blk;  // realloc: block bytes of the old block
};
struct pending {
    u64 type;
    u64 ptr;
    u64 size;
    u64 old_blk;
    u32 op;
    u32 valid;
};

BPF_PERCPU_HASH(hist, struct hkey, struct hval, 16384);
BPF_HASH(pend, u32, struct pending, MAX_THREADS);

static __always_inline void account(u64 allctr, u64 type, u32 op, u64 size, u64 blk, u64 old) {
    struct hkey k = {};
    k.allctr = allctr;
    k.type = type;
    k.op = op;
    k.slot = log2_slot(op == OP_ALLOC || op == OP_REALLOC ? size : blk);
    struct hval *v = hist.lookup(&k);
    if (!v) {
        struct hval z = {};
        hist.update(&k, &z);
        v = hist.lookup(&k);
        if (!v) {
            stat_add(ST_RINGBUF_FULL, 1);
            return;
        }
    }
    v->count += 1;
    v->bytes += size;
    v->blk += blk;
    v->old_blk += old;
}

// Calls are counted at entry (a uretprobe can be missed; the entry never is), by type, op and
// log2 of the requested size; block bytes and owners where they are known: at free entry and at
// alloc/realloc return (op | OP_RET).
static __always_inline int on_entry(u32 op, u64 type, u64 ptr, u64 size) {
    if (!is_enabled())
        return 0;
    stat_add(ST_CALLS, 1);
    if (op == OP_FREE) {
        u64 blk, allctr;
        owner_of(ptr, &blk, &allctr);
        account(allctr, type, OP_FREE, 0, blk, 0);
        return 0;
    }
    account(0, type, op, size, 0, 0);
#ifdef ENTRIES_ONLY
    return 0;  // sampling: no return probes, so nothing to hand over to them
#endif
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct pending p = {};
    p.type = type;
    p.ptr = ptr;
    p.size = size;
    p.op = op;
    p.valid = 1;
    if (op == OP_REALLOC) {
        u64 unused;
        owner_of(ptr, &p.old_blk, &unused);
    }
    // Written in place once the thread has its slot: a hash update takes a bucket lock and
    // a free-list element on every call, a lookup neither.
    struct pending *old = pend.lookup(&tid);
    if (!old) {
        if (pend.update(&tid, &p))
            stat_add(ST_NO_SLOT, 1);
        return 0;
    }
    if (old->valid)
        stat_add(ST_ENTRY_OVERWRITTEN, 1);
    *old = p;
    return 0;
}

static __always_inline int on_return(u64 ret) {
    if (!is_enabled())
        return 0;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct pending *p = pend.lookup(&tid);
    if (!p || !p->valid) {
        stat_add(ST_RETURN_WITHOUT_ENTRY, 1);
        return 0;
    }
    p->valid = 0;
    if (!ret)
        return 0;  // failed allocation: nothing became outstanding
    u64 blk, allctr;
    owner_of(ret, &blk, &allctr);
    account(allctr, p->type, p->op | OP_RET, blk, blk, p->old_blk);
    return 0;
}

#endif

int alloc_entry(struct pt_regs *ctx) {
    return on_entry(OP_ALLOC, PT_REGS_PARM1(ctx), 0, PT_REGS_PARM3(ctx));
}

int free_entry(struct pt_regs *ctx) {
    return on_entry(OP_FREE, PT_REGS_PARM1(ctx), PT_REGS_PARM3(ctx), 0);
}

int realloc_entry(struct pt_regs *ctx) {
    return on_entry(OP_REALLOC, PT_REGS_PARM1(ctx), PT_REGS_PARM3(ctx), PT_REGS_PARM4(ctx));
}

int any_return(struct pt_regs *ctx) {
    return on_return(PT_REGS_RC(ctx));
}
