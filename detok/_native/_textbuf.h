/* A growable byte buffer, shared by the compiled extensions (_plainstep.c, _streamcore.c through
 * stream/_utf8.h, and frontend/_chatlogprobs.c). */
#ifndef DETOK_TEXTBUF_H
#define DETOK_TEXTBUF_H

#include <Python.h>
#include <string.h>

/* bytes appended piece by piece (PyMem; the owner frees `data`) */
typedef struct {
    char *data;
    Py_ssize_t size, cap;
} Text;

static inline int text_append(Text *t, const char *p, Py_ssize_t n) {
    if (t->size + n > t->cap) {
        Py_ssize_t cap = t->cap * 2 > t->size + n ? t->cap * 2 : t->size + n + 256;
        char *data = PyMem_Realloc(t->data, cap);
        if (data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        t->data = data;
        t->cap = cap;
    }
    memcpy(t->data + t->size, p, n);
    t->size += n;
    return 0;
}

#endif
