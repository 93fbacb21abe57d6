/* The fields a received request's compiled push reads and writes, in the native side's own
 * storage (part of detok._native._chunkpush): StreamFields, the base of RequestStream
 * (detok/receiver/request_stream.py), and TypedFields, the base of TypedState
 * (detok/receiver/typed.py). Each is a struct of object fields exposed to Python as members of
 * the type itself (PyMemberDef), so the Python class reads them as it reads its own slots and
 * push_rows (_directrows.c, _typedrows.c) reads the struct: no attribute is looked up by name.
 * detok/receiver/stream_fields.py holds the Python twins of the same fields, used without this
 * extension. */
#ifndef DETOK_STREAMFIELDS_H
#define DETOK_STREAMFIELDS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
    PyObject_HEAD
    /* (NULL: not set yet; push_rows leaves such a stream to the Python path) */
    PyObject *chunks, *logprobs, *received, *next_token, *tokens, *finish, *waiter, *typed, *pusher, *push_error;
    char push_queued;
} StreamFields;

typedef struct {
    PyObject_HEAD
    PyObject *new_reasoning, *new_calls, *reasoning, *content, *args, *last_call;
} TypedFields;

/* 1 if `v` (a field: borrowed; NULL: not set) is an empty list, 0 if not */
static inline int detok_empty_list(PyObject *v) {
    return v != NULL && PyList_CheckExact(v) && PyList_GET_SIZE(v) == 0;
}

extern PyTypeObject detok_StreamFieldsType, detok_TypedFieldsType;

/* 0, or -1 with an exception set */
int detok_streamfields_ready(void);

#endif
