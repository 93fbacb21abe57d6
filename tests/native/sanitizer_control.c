/* The sanitizer run's negative controls (tests/native/sanitize.py builds this with the same compiler
 * and flags as detok's extensions and requires each call to produce a report): a heap write one past
 * an allocation (AddressSanitizer) and a signed overflow (UBSan). Never built into the package. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>

static PyObject *write_past_end(PyObject *self, PyObject *arg) {
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n < 0) return NULL;
    volatile char *buf = malloc(n);
    if (buf == NULL) return PyErr_NoMemory();
    buf[n] = 1; /* one byte past the allocation */
    free((void *)buf);
    Py_RETURN_NONE;
}

static PyObject *overflow_int(PyObject *self, PyObject *arg) {
    volatile int big = INT_MAX;
    int step = (int)PyLong_AsLong(arg);
    return PyLong_FromLong(big + step); /* signed overflow for step > 0 */
}

static PyMethodDef methods[] = {
    {"write_past_end", write_past_end, METH_O, NULL},
    {"overflow_int", overflow_int, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "sanitizer_control", NULL, -1, methods};

PyMODINIT_FUNC PyInit_sanitizer_control(void) { return PyModule_Create(&module); }
