/* Token strings of a logprob step, gathered in one pass (optional; detok/worker/logprobs.py has
 * the numpy equivalent).
 *
 * gather(ids, offsets, nbytes, buffer) -> bytes
 *   ids      int64 per string: an index into the table (checked: 0 <= id < len(offsets))
 *   offsets  int64 per table entry: where its UTF-8 bytes start in `buffer`
 *   nbytes   int64 per table entry: how many bytes (checked against the buffer)
 *   buffer   the table's bytes
 * Returns the strings' bytes back to back. One memcpy per string: the numpy path touches every
 * byte through index arrays, an object gather every string's refcount.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static int
get_int64(PyObject *obj, Py_buffer *view, const char *name)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != 8 || view->format == NULL || (strcmp(view->format, "l") && strcmp(view->format, "q")
                                                         && strcmp(view->format, "<q") && strcmp(view->format, "<l"))) {
        PyErr_Format(PyExc_TypeError, "%s must be a contiguous int64 array", name);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *
gather(PyObject *self, PyObject *args)
{
    PyObject *ids_o, *offsets_o, *nbytes_o, *buffer_o;
    Py_buffer ids, offsets, nbytes, buffer;
    PyObject *out = NULL;
    if (!PyArg_ParseTuple(args, "OOOO:gather", &ids_o, &offsets_o, &nbytes_o, &buffer_o))
        return NULL;
    if (get_int64(ids_o, &ids, "ids") < 0)
        return NULL;
    if (get_int64(offsets_o, &offsets, "offsets") < 0)
        goto release_ids;
    if (get_int64(nbytes_o, &nbytes, "nbytes") < 0)
        goto release_offsets;
    if (PyObject_GetBuffer(buffer_o, &buffer, PyBUF_SIMPLE) < 0)
        goto release_nbytes;
    {
        const int64_t *id = ids.buf, *off = offsets.buf, *nb = nbytes.buf;
        const Py_ssize_t n = ids.len / 8, table = offsets.len / 8;
        const char *src = buffer.buf;
        Py_ssize_t total = 0, i;
        if (nbytes.len != offsets.len) {
            PyErr_SetString(PyExc_ValueError, "offsets and nbytes differ in length");
            goto release_buffer;
        }
        for (i = 0; i < n; i++) {
            const int64_t k = id[i];
            /* (compared without adding them: an offset and a length near INT64_MAX must not wrap) */
            if (k < 0 || k >= table || off[k] < 0 || nb[k] < 0 || off[k] > buffer.len || nb[k] > buffer.len - off[k]) {
                PyErr_Format(PyExc_ValueError, "string %zd: id %lld outside the table", i, (long long)k);
                goto release_buffer;
            }
            if ((Py_ssize_t)nb[k] > PY_SSIZE_T_MAX - total) {
                PyErr_NoMemory();
                goto release_buffer;
            }
            total += (Py_ssize_t)nb[k];
        }
        out = PyBytes_FromStringAndSize(NULL, total);
        if (out != NULL) {
            char *dst = PyBytes_AS_STRING(out);
            for (i = 0; i < n; i++) {
                const int64_t k = id[i];
                memcpy(dst, src + off[k], (size_t)nb[k]);
                dst += nb[k];
            }
        }
    }
release_buffer:
    PyBuffer_Release(&buffer);
release_nbytes:
    PyBuffer_Release(&nbytes);
release_offsets:
    PyBuffer_Release(&offsets);
release_ids:
    PyBuffer_Release(&ids);
    return out;
}

static PyMethodDef methods[] = {
    {"gather", gather, METH_VARARGS, "gather(ids, offsets, nbytes, buffer) -> the strings' bytes back to back"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tokenstrings", NULL, -1, methods};

PyMODINIT_FUNC
PyInit__tokenstrings(void)
{
    return PyModule_Create(&module);
}
