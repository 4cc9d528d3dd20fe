// Carrier level: what beam.smp asks of the OS and of libc, cheap enough to leave on.
//
// * syscalls mmap/munmap/mremap/madvise (tracepoints: no trap), counts and log2 sizes;
// * erts_mseg_{alloc,dealloc,realloc}_opt and erts_sys_{alloc,realloc,free,aligned_*}: carriers
//   and sys_alloc blocks, per allocator (docs/erts/alloc_util.md §7 signatures);
// * libc malloc/calloc/realloc/posix_memalign/aligned_alloc/free called from anywhere but
//   erts_sys_* (NIFs, drivers, libraries): outstanding bytes and the call stacks that hold them.
//   An erts_sys_* entry marks the thread; the next libc call on it is the one erts_sys_* makes
//   (they call libc once, or tail-call it), so it is not counted as foreign.

#include <uapi/linux/ptrace.h>

#include "bits.bpf.h"

#define NSLOTS 48
enum kind {
    K_MMAP, K_MUNMAP, K_MREMAP, K_MADVISE,
    K_MSEG_ALLOC, K_MSEG_DEALLOC, K_MSEG_REALLOC,
    K_SYS_ALLOC, K_SYS_REALLOC, K_SYS_FREE,
    K_LIBC_ALLOC, K_LIBC_FREE, K_LIBC_REALLOC,
    NKINDS
};

// (kind, sub, log2 size) -> count, bytes.  sub: allocator number for mseg/sys, MBC bit, advice.
struct ckey {
    u32 kind;
    u32 sub;
    u32 slot;
    u32 pad;
};
struct cval {
    u64 count;
    u64 bytes;
};
BPF_PERCPU_HASH(cstats, struct ckey, struct cval, 4096);

struct live {
    u64 size;
    s64 stack;
};
BPF_HASH(foreign, u64, struct live, MAX_LIVE);       // outstanding foreign malloc blocks
BPF_HASH(pend, u32, struct live, 4096);              // foreign malloc in flight (size, stack)
BPF_HASH(sysmark, u32, u32, 4096);                   // thread inside erts_sys_*
BPF_STACK_TRACE(stacks, 4096);
BPF_PERCPU_ARRAY(lost, u64, 1);                      // foreign blocks we could not remember

static __always_inline void add(u32 kind, u32 sub, u64 size) {
    struct ckey k = {kind, sub, log2_slot(size), 0};
    struct cval *v = cstats.lookup(&k);
    if (!v) {
        struct cval z = {};
        cstats.update(&k, &z);
        v = cstats.lookup(&k);
        if (!v)
            return;
    }
    v->count += 1;
    v->bytes += size;
}

static __always_inline int ours(void) {
    return (bpf_get_current_pid_tgid() >> 32) == TGID;
}

// --- syscalls ------------------------------------------------------------------------------

TRACEPOINT_PROBE(syscalls, sys_enter_mmap) {
    if (ours())
        add(K_MMAP, 0, args->len);
    return 0;
}
TRACEPOINT_PROBE(syscalls, sys_enter_munmap) {
    if (ours())
        add(K_MUNMAP, 0, args->len);
    return 0;
}
TRACEPOINT_PROBE(syscalls, sys_enter_mremap) {
    if (ours())
        add(K_MREMAP, args->new_len >= args->old_len, args->new_len);
    return 0;
}
TRACEPOINT_PROBE(syscalls, sys_enter_madvise) {
    if (ours())
        add(K_MADVISE, args->behavior, args->len_in);
    return 0;
}

// --- erts_mseg / erts_sys ------------------------------------------------------------------

// void *erts_mseg_alloc_opt(ErtsAlcType_t alloc_no, UWord *size_p, Uint flags, opt)
int mseg_alloc(struct pt_regs *ctx) {
    u64 size = 0;
    bpf_probe_read_user(&size, sizeof(size), (void *)PT_REGS_PARM2(ctx));
    add(K_MSEG_ALLOC, ((u32)PT_REGS_PARM1(ctx) << 1) | (PT_REGS_PARM3(ctx) & 1), size);
    return 0;
}
// void erts_mseg_dealloc_opt(ErtsAlcType_t alloc_no, void *seg, UWord size, Uint flags, opt)
int mseg_dealloc(struct pt_regs *ctx) {
    add(K_MSEG_DEALLOC, ((u32)PT_REGS_PARM1(ctx) << 1) | (PT_REGS_PARM4(ctx) & 1),
        PT_REGS_PARM3(ctx));
    return 0;
}
// void *erts_mseg_realloc_opt(alloc_no, void *seg, UWord old, UWord *new_size_p, flags, opt)
int mseg_realloc(struct pt_regs *ctx) {
    u64 size = 0;
    bpf_probe_read_user(&size, sizeof(size), (void *)PT_REGS_PARM4(ctx));
    add(K_MSEG_REALLOC, ((u32)PT_REGS_PARM1(ctx) << 1) | (PT_REGS_PARM5(ctx) & 1), size);
    return 0;
}

static __always_inline void mark(void) {
    u32 tid = (u32)bpf_get_current_pid_tgid(), one = 1;
    sysmark.update(&tid, &one);
}
// erts_sys_alloc(t, x, sz) / erts_sys_realloc(t, x, p, sz) / erts_sys_free(t, x, p)
int sys_alloc(struct pt_regs *ctx) {
    mark();
    add(K_SYS_ALLOC, (u32)PT_REGS_PARM1(ctx), PT_REGS_PARM3(ctx));
    return 0;
}
int sys_realloc(struct pt_regs *ctx) {
    mark();
    add(K_SYS_REALLOC, (u32)PT_REGS_PARM1(ctx), PT_REGS_PARM4(ctx));
    return 0;
}
int sys_free(struct pt_regs *ctx) {
    mark();
    add(K_SYS_FREE, (u32)PT_REGS_PARM1(ctx), 0);
    return 0;
}
// erts_sys_aligned_alloc(alignment, size): the MBC sys_alloc carriers (sub 1)
int sys_aligned_alloc(struct pt_regs *ctx) {
    mark();
    add(K_SYS_ALLOC, 0xFFFF, PT_REGS_PARM2(ctx));
    return 0;
}
int sys_aligned_free(struct pt_regs *ctx) {
    mark();
    add(K_SYS_FREE, 0xFFFF, 0);
    return 0;
}

// --- libc ----------------------------------------------------------------------------------

// True if this libc call is the one an erts_sys_* call is making (and clears the mark).
static __always_inline int from_erts(void) {
    u32 tid = (u32)bpf_get_current_pid_tgid();
    u32 *m = sysmark.lookup(&tid);
    if (m && *m) {
        *m = 0;
        return 1;
    }
    return 0;
}

static __always_inline int foreign_alloc(struct pt_regs *ctx, u64 size) {
    if (from_erts())
        return 0;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct live l = {size, stacks.get_stackid(ctx, BPF_F_USER_STACK)};
    pend.update(&tid, &l);
    return 0;
}

int libc_malloc(struct pt_regs *ctx) {
    return foreign_alloc(ctx, PT_REGS_PARM1(ctx));
}
int libc_calloc(struct pt_regs *ctx) {
    return foreign_alloc(ctx, PT_REGS_PARM1(ctx) * PT_REGS_PARM2(ctx));
}
int libc_aligned_alloc(struct pt_regs *ctx) {
    return foreign_alloc(ctx, PT_REGS_PARM2(ctx));
}

static __always_inline void forget(u64 p) {
    struct live *l = foreign.lookup(&p);
    if (l) {
        add(K_LIBC_FREE, 0, l->size);
        foreign.delete(&p);
    }
}

int libc_free(struct pt_regs *ctx) {
    from_erts();
    u64 p = PT_REGS_PARM1(ctx);
    if (p)
        forget(p);
    return 0;
}

// realloc(p, n): the old block is gone either way; the new one is foreign unless erts made it.
int libc_realloc(struct pt_regs *ctx) {
    int erts = from_erts();
    u64 p = PT_REGS_PARM1(ctx);
    if (p)
        forget(p);
    if (!erts) {
        u32 tid = (u32)bpf_get_current_pid_tgid();
        struct live l = {PT_REGS_PARM2(ctx), stacks.get_stackid(ctx, BPF_F_USER_STACK)};
        pend.update(&tid, &l);
    }
    return 0;
}

int libc_alloc_return(struct pt_regs *ctx) {
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct live *l = pend.lookup(&tid);
    if (!l)
        return 0;
    u64 p = PT_REGS_RC(ctx);
    if (p) {
        struct live v = *l;
        if (foreign.update(&p, &v)) {
            int z = 0;
            u64 *n = lost.lookup(&z);
            if (n)
                *n += 1;
        }
        add(K_LIBC_ALLOC, 0, v.size);
    }
    pend.delete(&tid);
    return 0;
}

// posix_memalign(void **pp, align, size): the block is *pp after the call.
BPF_HASH(memalign_pp, u32, u64, 4096);
int libc_posix_memalign(struct pt_regs *ctx) {
    if (from_erts())
        return 0;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    u64 pp = PT_REGS_PARM1(ctx);
    struct live l = {PT_REGS_PARM3(ctx), stacks.get_stackid(ctx, BPF_F_USER_STACK)};
    pend.update(&tid, &l);
    memalign_pp.update(&tid, &pp);
    return 0;
}
int libc_posix_memalign_return(struct pt_regs *ctx) {
    u32 tid = (u32)bpf_get_current_pid_tgid();
    u64 *pp = memalign_pp.lookup(&tid);
    struct live *l = pend.lookup(&tid);
    if (!pp || !l)
        return 0;
    u64 p = 0;
    if (PT_REGS_RC(ctx) == 0)
        bpf_probe_read_user(&p, sizeof(p), (void *)*pp);
    if (p) {
        struct live v = *l;
        foreign.update(&p, &v);
        add(K_LIBC_ALLOC, 0, v.size);
    }
    memalign_pp.delete(&tid);
    pend.delete(&tid);
    return 0;
}
