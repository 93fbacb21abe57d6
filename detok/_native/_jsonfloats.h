/* The numbers of a JSON array of numbers located in place, shared by the compiled chat logprobs
 * writers (frontend/_chatlogprobs.c, worker/_chatentries.c): both keep msgspec's float format by
 * copying the bytes msgspec wrote for a column's floats. */
#ifndef DETOK_JSONFLOATS_H
#define DETOK_JSONFLOATS_H

#include <Python.h>

#include "_textbuf.h"

/* Start offset and length of each number in a JSON array of numbers `[a,b,...]`. */
static inline int
split_floats(PyObject *json, Py_ssize_t want, Py_ssize_t **starts, Py_ssize_t **lens, const char *name)
{
    if (!PyBytes_Check(json)) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes", name);
        return -1;
    }
    const char *s = PyBytes_AS_STRING(json);
    Py_ssize_t n = PyBytes_GET_SIZE(json);
    if (n < 2 || s[0] != '[' || s[n - 1] != ']') {
        PyErr_Format(PyExc_ValueError, "%s is not a JSON array", name);
        return -1;
    }
    *starts = PyMem_Malloc(sizeof(Py_ssize_t) * (want + 1));
    *lens = PyMem_Malloc(sizeof(Py_ssize_t) * (want + 1));
    if (*starts == NULL || *lens == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t count = 0, at = 1;
    if (n > 2) {
        for (Py_ssize_t i = 1; i < n; i++) {
            if (s[i] == ',' || i == n - 1) {
                if (count >= want || i == at) {
                    PyErr_Format(PyExc_ValueError, "%s: more numbers than entries", name);
                    return -1;
                }
                (*starts)[count] = at;
                (*lens)[count] = i - at;
                count++;
                at = i + 1;
            }
        }
    }
    if (count != want) {
        PyErr_Format(PyExc_ValueError, "%s: %zd numbers for %zd entries", name, count, want);
        return -1;
    }
    return 0;
}

/* A logprob's JSON: msgspec's bytes for it (`json[start:start+len]`), or, for a value that is not
 * finite or is below -9999.0, OpenAI's -9999.0 (+inf: 0.0), msgspec's spelling of those. */
static inline int
put_json_float(Text *b, double v, const char *json, Py_ssize_t start, Py_ssize_t len)
{
    if (v >= -9999.0 && v < Py_HUGE_VAL)
        return text_append(b, json + start, len);
    if (v == Py_HUGE_VAL)
        return text_append(b, "0.0", 3);
    return text_append(b, "-9999.0", 7); /* -inf, NaN, below the floor */
}

#endif
