/* Eight bytes at a time: tests over a 64-bit word for the byte scans that run per message
 * (JSON strings, header values, CloudEvents attributes). A scan loads a word, asks whether any
 * of its bytes needs a closer look, and walks byte by byte only from the first word that does,
 * so text of plain ASCII costs about one test per eight bytes.
 *
 * Each test tells exactly whether some byte of the word matches, and which is the first
 * (pb_bytes_first); the flags it sets past the first may be wrong, so callers look at the bytes
 * from the first on themselves. */
#ifndef PB_COMMON_BYTES_H
#define PB_COMMON_BYTES_H

#include <stdint.h>
#include <string.h>

#define PB_BYTES_ONES UINT64_C(0x0101010101010101)
#define PB_BYTES_HIGHS UINT64_C(0x8080808080808080)

/* The eight bytes at p (any alignment). */
static inline uint64_t pb_bytes_load(const void *p)
{
    uint64_t w;
    memcpy(&w, p, sizeof w);
    return w;
}

/* Non-zero when some byte of w is below n; n at most 128 (bytes of 0x80 and above never
 * count as below). */
static inline uint64_t pb_bytes_below(uint64_t w, unsigned n)
{
    return (w - PB_BYTES_ONES * n) & ~w & PB_BYTES_HIGHS;
}

/* Non-zero when some byte of w is c. */
static inline uint64_t pb_bytes_has(uint64_t w, unsigned char c)
{
    return pb_bytes_below(w ^ (PB_BYTES_ONES * c), 1);
}

/* Non-zero when some byte of w is 0x80 or above (not ASCII). */
static inline uint64_t pb_bytes_high(uint64_t w)
{
    return w & PB_BYTES_HIGHS;
}

/* The index (0 to 7) of the first byte, in memory order, of a word from pb_bytes_load that a
 * non-zero result of the tests above (or of several, or-ed) flags: the lowest flag of each test
 * is exact, as a borrow only moves towards later bytes. Where words load big-endian that does not
 * hold, and 0 comes back: the caller then walks the whole word. */
static inline unsigned pb_bytes_first(uint64_t flags)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return (unsigned)__builtin_ctzll(flags) / 8;
#else
    (void)flags;
    return 0;
#endif
}

#endif
