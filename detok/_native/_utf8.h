/* UTF-8 decoding shared by the compiled stream extensions (_plainstep.c, _streamcore.c). */
#ifndef DETOK_UTF8_H
#define DETOK_UTF8_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_textbuf.h"

#define MAX_PENDING 4 /* held bytes of an incomplete character: at most 3 */

/* Decode s[0:n] as UTF-8 the way CPython's incremental decoder does with errors="replace" and
 * final=False: each maximal invalid subpart becomes one U+FFFD, and an incomplete but so far valid
 * sequence at the end is not consumed. The text goes to `out` (as UTF-8; NULL: only counted); returns
 * its chars, and the bytes consumed in *used; -1 on memory error. */
static inline int64_t utf8_replace(Text *out, const unsigned char *s, Py_ssize_t n, Py_ssize_t *used) {
    static const char FFFD[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    Py_ssize_t i = 0;
    int64_t chars = 0;
    while (i < n) {
        unsigned char b = s[i];
        int need;
        unsigned char lo = 0x80, hi = 0xBF;
        if (b < 0x80) need = 0;
        else if (b >= 0xC2 && b <= 0xDF) need = 1;
        else if (b == 0xE0) need = 2, lo = 0xA0;
        else if (b == 0xED) need = 2, hi = 0x9F;
        else if (b >= 0xE1 && b <= 0xEF) need = 2;
        else if (b == 0xF0) need = 3, lo = 0x90;
        else if (b == 0xF4) need = 3, hi = 0x8F;
        else if (b >= 0xF1 && b <= 0xF3) need = 3;
        else need = -1; /* never a start byte */
        if (need < 0) {
            if (out && text_append(out, FFFD, 3) < 0) return -1;
            i++, chars++;
            continue;
        }
        if (b == 0xED && n - i == 2 && s[i + 1] >= 0xA0 && s[i + 1] <= 0xBF) {
            *used = i; /* as CPython: a truncated surrogate at the end waits for more bytes */
            return chars;
        }
        int j = 1;
        for (; j <= need; j++) {
            if (i + j >= n) { /* incomplete at the end: held for the next bytes */
                *used = i;
                return chars;
            }
            unsigned char c = s[i + j];
            if (c < (j == 1 ? lo : 0x80) || c > (j == 1 ? hi : 0xBF)) break;
        }
        if (j > need) {
            if (out && text_append(out, (const char *)s + i, need + 1) < 0) return -1;
            i += need + 1;
        } else { /* bytes i .. i+j-1 are a maximal invalid subpart */
            if (out && text_append(out, FFFD, 3) < 0) return -1;
            i += j;
        }
        chars++;
    }
    *used = n;
    return chars;
}

#endif
