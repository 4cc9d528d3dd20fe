/* glibc baseline for bench_replay.py: replay the alloc/free/realloc sequence of a beamalloc
 * binary trace (docs/trace-format.md, version 1) through malloc/free/realloc and print
 * "EVENTS SECONDS MAXRSS_KB CPU_SECONDS" (CPU time of the thread, as the Rust bench reports it:
 * on a shared machine wall time also counts other processes). Block ids must be dense (< 2^32, as the bench's generator writes
 * them): they index a table of pointers. The file is mapped and decoded in the timed loop, as
 * refalloc decodes it too. Build: cc -O2 -o glibc_replay glibc_replay.c
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const uint8_t *p, *end;

static uint64_t uvarint(void) {
    uint64_t v = 0;
    for (int shift = 0; p < end && shift < 70; shift += 7) {
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) return v;
    }
    fprintf(stderr, "bad varint\n");
    exit(2);
}

static int64_t svarint(void) {
    uint64_t u = uvarint();
    return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: glibc_replay TRACE.batr\n");
        return 2;
    }
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        perror(argv[1]);
        return 2;
    }
    const uint8_t *base = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (base == MAP_FAILED || st.st_size < 16 || memcmp(base, "\x89" "BATR\r\n\x1a", 8) != 0) {
        fprintf(stderr, "%s: not a beamalloc trace\n", argv[1]);
        return 2;
    }
    madvise((void *)base, st.st_size, MADV_SEQUENTIAL);
    uint32_t hlen;
    memcpy(&hlen, base + 12, 4);
    p = base + 16 + hlen;
    end = base + st.st_size;
    /* touch the file once so both replays start from the page cache */
    volatile uint8_t sink = 0;
    for (const uint8_t *q = p; q < end; q += 4096) sink ^= *q;

    size_t cap = 1 << 20;
    void **slot = calloc(cap, sizeof(void *));
    uint64_t id = 0, n = 0;
    struct timespec t0, t1, c0, c1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    while (p < end) {
        uint8_t tag = *p++;
        if (tag == 0x03) break;
        (void)svarint(); /* time */
        if (tag & 0x04) { (void)uvarint(); (void)uvarint(); (void)uvarint(); }
        if (tag & 0x08) (void)uvarint();
        uint64_t size = uvarint();
        id += (uint64_t)svarint();
        uint64_t new_id = id;
        if ((tag & 3) == 2) new_id = id + (uint64_t)svarint();
        uint64_t top = id > new_id ? id : new_id;
        if (top >= cap) {
            size_t ncap = cap;
            while (ncap <= top) ncap *= 2;
            slot = realloc(slot, ncap * sizeof(void *));
            memset(slot + cap, 0, (ncap - cap) * sizeof(void *));
            cap = ncap;
        }
        switch (tag & 3) {
        case 0:
            slot[id] = malloc(size);
            *(volatile char *)slot[id] = 1; /* the VM writes its block header */
            break;
        case 1:
            free(slot[id]);
            slot[id] = NULL;
            break;
        case 2: {
            void *q = realloc(slot[id], size);
            slot[id] = NULL;
            slot[new_id] = q;
            break;
        }
        }
        n++;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    double cpu = (c1.tv_sec - c0.tv_sec) + (c1.tv_nsec - c0.tv_nsec) / 1e9;
    printf("%llu %.6f %ld %.6f\n", (unsigned long long)n, secs, ru.ru_maxrss, cpu);
    return sink == 255 ? 0 : 0;
}
